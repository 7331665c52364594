package relay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// swapSource is a Source whose snapshot the test replaces, as a rebuild does.
type swapSource struct {
	p atomic.Pointer[snapshot.Snapshot]
}

func (s *swapSource) Current() *snapshot.Snapshot { return s.p.Load() }

// revokedUpstream is an OAuth upstream whose refresh grant its provider
// refused: the token is still stored, but revoked.
func revokedUpstream(id, url string) store.Upstream {
	u := oauthUpstream(id, url, `{"access_token":"tok-revoked"}`)
	u.Status.RefreshRefused = true
	return u
}

// An upstream whose credential the provider revoked is out of routing: the
// request goes to the next candidate, the revoked token is never sent and
// no refresh is asked for (the provider already refused it).
func TestRevokedUpstreamPassedOver(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	revoked := refusingUpstream(t, &hits)
	good := upstreamServer(t, &seen{}, nil)
	ref := newFakeRefresher()
	rs := newResilient(t, fixture(revokedUpstream("up_o", revoked.URL), apiKeyUpstream("up_k", good.URL, "sk-upstream")), Options{Refresher: ref})
	for _, body := range []string{`{"model":"claude-test","max_tokens":5}`, streamBody} {
		resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, body)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, b)
		}
	}
	resp, b := post(t, rs.srv.URL+"/v1/messages/count_tokens", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("count_tokens: status %d %s", resp.StatusCode, b)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the revoked token was sent upstream %d times", n)
	}
	if len(ref.calls) != 0 {
		t.Fatal("a refresh of a refused grant was asked for")
	}
	for _, ev := range rs.waitEvents(t, 3) {
		if ev.UpstreamID != "up_k" || ev.Status != 200 {
			t.Fatalf("event %+v", ev)
		}
	}
	if n := rs.counter(t, "svc_proxy_upstream_failovers_total"); n != 3 {
		t.Fatalf("failovers counted %v, want 3", n)
	}
}

// With only revoked upstreams left the client gets a 503 that names the
// state and tells the SDKs not to retry (no retry helps until an operator
// runs the OAuth flow again), and nothing reaches the provider. Once a new
// credential is stored the upstream is routed to again.
func TestRevokedLastUpstream(t *testing.T) {
	t.Parallel()
	var revokedSent, served atomic.Int32
	prov := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok-new" {
			revokedSent.Add(1)
			w.WriteHeader(401)
			return
		}
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","usage":{"input_tokens":5,"output_tokens":2}}`)
	}))
	defer prov.Close()
	src := &swapSource{}
	src.p.Store(fixture(revokedUpstream("up_o", prov.URL)))
	rec := &memRecorder{}
	h := New(Options{Source: src, Recorder: rec, Metrics: NewMetrics(prometheus.NewRegistry()), Refresher: newFakeRefresher()})
	srv := httptest.NewServer(h)
	defer srv.Close()
	for _, body := range []string{`{"model":"claude-test","max_tokens":5}`, streamBody} {
		resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, body)
		wantAnthropicError(t, resp, b, 503, "api_error")
		if got := resp.Header.Get("X-Should-Retry"); got != "false" {
			t.Fatalf("x-should-retry %q: no retry helps until the OAuth flow is run again", got)
		}
		if !strings.Contains(b, "revoked") || !strings.Contains(b, "run the OAuth flow again") {
			t.Fatalf("the message does not name the upstream's state: %s", b)
		}
	}
	if n := revokedSent.Load(); n != 0 {
		t.Fatalf("the revoked token was sent upstream %d times", n)
	}
	for _, ev := range rec.wait(t, 2) {
		if ev.Status != 503 || ev.ErrorType != "upstream_credential_revoked" || ev.UpstreamID != "up_o" {
			t.Fatalf("event %+v", ev)
		}
	}

	// The OAuth flow run again: a new credential, the refusal cleared.
	src.p.Store(fixture(oauthUpstream("up_o", prov.URL, `{"access_token":"tok-new"}`)))
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	if resp.StatusCode != 200 || served.Load() != 1 || revokedSent.Load() != 0 {
		t.Fatalf("after a new credential: status %d %s", resp.StatusCode, b)
	}
}
