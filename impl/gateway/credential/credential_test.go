package credential

import (
	"bytes"
	"net/http"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func TestSetByKind(t *testing.T) {
	for _, tc := range []struct {
		name, kind, beta        string
		wantKey, wantAuth, want string
	}{
		{name: "api key", kind: APIKey, wantKey: "s"},
		{name: "no kind is sent as a key", kind: "", wantKey: "s"},
		{name: "oauth", kind: OAuth, wantAuth: "Bearer s", want: OAuthBeta},
		{name: "oauth joins the client's betas", kind: OAuth, beta: "prompt-caching-2024-07-31", wantAuth: "Bearer s", want: "prompt-caching-2024-07-31," + OAuthBeta},
		{name: "oauth beta not repeated", kind: OAuth, beta: "x," + OAuthBeta, wantAuth: "Bearer s", want: "x," + OAuthBeta},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.beta != "" {
				h.Set("Anthropic-Beta", tc.beta)
			}
			Set(h, tc.kind, "s")
			if h.Get("X-Api-Key") != tc.wantKey || h.Get("Authorization") != tc.wantAuth || h.Get("Anthropic-Beta") != tc.want {
				t.Fatalf("headers %v", h)
			}
		})
	}
}

// The associated data binds a credential to its upstream and to the
// origins it is sent to: another id, another base_url origin or (OAuth)
// another token endpoint origin gives other bytes; another path, letter
// case or the scheme's default port written out gives the same.
func TestADBindsTheUpstreamAndItsOrigins(t *testing.T) {
	base := AD("up_1", store.KindVendorAPIKey, "https://api.example", "")
	if string(base) != "upstream-credential:up_1@https://api.example:443" {
		t.Fatalf("AD = %q", base)
	}
	for _, same := range [][]byte{
		AD("up_1", store.KindVendorAPIKey, "https://API.example:443/v1/", ""),
		AD("up_1", store.KindVendorAPIKey, "https://api.example", "https://ignored.example/token"), // API keys never go to a token endpoint
	} {
		if !bytes.Equal(same, base) {
			t.Errorf("%q differs from %q", same, base)
		}
	}
	for _, other := range [][]byte{
		AD("up_2", store.KindVendorAPIKey, "https://api.example", ""),
		AD("up_1", store.KindVendorAPIKey, "https://evil.example", ""),
		AD("up_1", store.KindVendorAPIKey, "http://api.example", ""),
		AD("up_1", store.KindVendorAPIKey, "https://api.example:8443", ""),
		LegacyAD("up_1"),
	} {
		if bytes.Equal(other, base) {
			t.Errorf("%q shares associated data with %q", other, base)
		}
	}
	oauth := AD("up_1", store.KindVendorOAuth, "https://api.example", "https://auth.example/token")
	for _, other := range [][]byte{
		AD("up_1", store.KindVendorOAuth, "https://api.example", "https://evil.example/token"),
		AD("up_1", store.KindVendorOAuth, "https://api.example", ""),
		AD("up_1", store.KindVendorOAuth, "https://evil.example", "https://auth.example/token"),
	} {
		if bytes.Equal(other, oauth) {
			t.Errorf("%q shares associated data with %q", other, oauth)
		}
	}
	if string(LegacyAD("up_1")) != "upstream-credential:up_1" {
		t.Fatalf("LegacyAD = %q: not the format credentials were sealed with before", LegacyAD("up_1"))
	}
}
