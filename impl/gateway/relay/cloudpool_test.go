package relay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

func bedrockUpstream(id, url, keyID string) store.Upstream {
	keys := cloud.StaticAWSCredentials{AccessKeyID: keyID, SecretAccessKey: "s"}.JSON()
	return store.Upstream{ID: id, Name: id, Kind: store.KindBedrock, BaseURL: url, Enabled: true,
		Credential: keys, CredentialKind: credential.AWSKeys, Cloud: store.CloudConfig{Region: "us-east-1"}}
}

// The cloud pool follows the snapshots: an upstream's credential source
// goes when the upstream does, and a changed credential signs the next
// request.
func TestCloudPoolFollowsTheSnapshot(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var auths []string
	bedrock := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auths = append(auths, r.Header.Get("Authorization"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","model":"anthropic.x-v1:0","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	t.Cleanup(bedrock.Close)
	other := upstreamServer(t, &seen{}, nil)
	src := &swapSource{}
	src.p.Store(fixture(bedrockUpstream("up_b", bedrock.URL, "AKIAFIRST")))
	h := New(Options{Source: src})
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	send := func() {
		t.Helper()
		if resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`); resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, b)
		}
	}
	lastKey := func() string {
		mu.Lock()
		defer mu.Unlock()
		_, cred, _ := strings.Cut(auths[len(auths)-1], "Credential=")
		key, _, _ := strings.Cut(cred, "/")
		return key
	}
	send()
	if n := h.clouds.Len(); n != 1 || lastKey() != "AKIAFIRST" {
		t.Fatalf("after one request: pool %d, signed by %q", n, lastKey())
	}
	src.p.Store(fixture(bedrockUpstream("up_b", bedrock.URL, "AKIASECOND")))
	send()
	if n := h.clouds.Len(); n != 1 || lastKey() != "AKIASECOND" {
		t.Fatalf("after the keys changed: pool %d, signed by %q", n, lastKey())
	}
	src.p.Store(fixture(apiKeyUpstream("up_k", other.URL, "sk-upstream")))
	send()
	if n := h.clouds.Len(); n != 0 {
		t.Fatalf("the deleted upstream's source is kept: pool %d", n)
	}
}
