package relay

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// cutServer serves h with a base context the test cancels with the
// shutdown cause, as the proxy's server does when its drain times out.
func cutServer(t *testing.T, h http.Handler) (*httptest.Server, func()) {
	t.Helper()
	base, cut := context.WithCancelCause(context.Background())
	srv := httptest.NewUnstartedServer(h)
	srv.Config.BaseContext = func(net.Listener) context.Context { return base }
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, func() { cut(ErrShuttingDown) }
}

// A stream still relaying when the drain ends is cut visibly: the client
// gets Anthropic's error event and a transfer without its final chunk, and
// the request event is handed over before the handler returns, recorded as
// cut by the shutdown, not blamed on the upstream.
func TestShutdownCutEndsStreamWithErrorEvent(t *testing.T) {
	t.Parallel()
	held := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseEvents(w, 1)
		select { // the stream stays open until the proxy gives up on it
		case <-r.Context().Done():
		case <-held:
		}
	}))
	defer func() { close(held); up.Close() }()
	rec := &memRecorder{}
	reg := prometheus.NewRegistry()
	returned := make(chan struct{})
	h := New(Options{Source: fakeSource{fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream"))}, Recorder: rec, Metrics: NewMetrics(reg)})
	srv, cut := cutServer(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer close(returned)
		h.ServeHTTP(w, r)
	}))

	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(streamBody))
	req.Header.Set("x-api-key", "sk-good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	rd := bufio.NewReader(resp.Body)
	if line, _ := rd.ReadString('\n'); line != "event: message_start\n" {
		t.Fatalf("first line %q", line)
	}
	cut()
	rest, rerr := io.ReadAll(rd)
	wantStreamError(t, string(rest), rerr)
	if !strings.Contains(string(rest), "shutting down") {
		t.Fatalf("the error event does not say why: %q", rest)
	}
	<-returned
	// Handed over before the handler returned: no waiting needed.
	evs := rec.events()
	if len(evs) != 1 || evs[0].ErrorType != "proxy_shutdown" || evs[0].Status != 200 || evs[0].InputTokens != 9 {
		t.Fatalf("events %+v", evs)
	}
	rs := &resilient{reg: reg}
	if n := rs.counter(t, "svc_proxy_upstream_interrupted_total"); n != 0 {
		t.Fatalf("counted as an upstream interruption (%v)", n)
	}
	if n := rs.counter(t, "svc_proxy_upstream_errors_total", "upstream", "up_1", "class", "protocol"); n != 0 {
		t.Fatalf("counted as an upstream error (%v)", n)
	}
}

// A request still waiting for the upstream's headers when the drain ends
// is answered (503, retryable: another replica can serve it), not dropped.
func TestShutdownCutBeforeHeaders(t *testing.T) {
	t.Parallel()
	arrived, held := make(chan struct{}), make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		close(arrived)
		select {
		case <-r.Context().Done():
		case <-held:
		}
	}))
	defer func() { close(held); up.Close() }()
	rec := &memRecorder{}
	h := New(Options{Source: fakeSource{fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream"))}, Recorder: rec})
	srv, cut := cutServer(t, h)
	go func() { <-arrived; cut() }()
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	wantAnthropicError(t, resp, b, 503, "api_error")
	if resp.Header.Get("X-Should-Retry") != "true" || !strings.Contains(b, "shutting down") {
		t.Fatalf("x-should-retry %q, body %s", resp.Header.Get("X-Should-Retry"), b)
	}
	evs := rec.wait(t, 1)
	if evs[0].ErrorType != "proxy_shutdown" || evs[0].Status != 503 {
		t.Fatalf("event %+v", evs[0])
	}
}
