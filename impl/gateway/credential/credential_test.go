package credential

import (
	"bytes"
	"net/http"
	"testing"
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

// The associated data binds a credential to its upstream: another id gives
// other bytes, and the format is the one stored ciphertexts were sealed with.
func TestADBindsTheUpstream(t *testing.T) {
	if string(AD("up_1")) != "upstream-credential:up_1" {
		t.Fatalf("AD = %q", AD("up_1"))
	}
	if bytes.Equal(AD("up_1"), AD("up_2")) {
		t.Fatal("two upstreams share associated data")
	}
}
