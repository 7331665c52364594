package relay

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
)

// The relay follows no upstream redirect: an upstream answering 307 to
// another host gets nothing sent there, on every proxied path (the
// upstream's credential would go with it).
func TestRelayFollowsNoUpstreamRedirect(t *testing.T) {
	t.Parallel()
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer other.Close()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer up.Close()
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), &memRecorder{})
	defer srv.Close()
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/v1/messages", `{"model":"claude-test","max_tokens":5,"messages":[]}`},
		{"POST", "/v1/messages", `{"model":"claude-test","max_tokens":5,"stream":true,"messages":[]}`},
		{"POST", "/v1/messages/count_tokens", `{"model":"claude-test","messages":[]}`},
		{"GET", "/v1/models", ""},
	} {
		req, _ := http.NewRequest(c.method, srv.URL+c.path, strings.NewReader(c.body))
		req.Header.Set("x-api-key", "sk-good")
		req.Header.Set("Content-Type", "application/json")
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d proxied request(s) followed the upstream's redirect", n)
	}
}
