package relay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// resilient is a relay under test with its recorder, metrics and clock.
type resilient struct {
	h     *Handler
	srv   *httptest.Server
	rec   *memRecorder
	reg   *prometheus.Registry
	clock *fakeclock.Clock
}

func newResilient(t *testing.T, s *snapshot.Snapshot, o Options) *resilient {
	t.Helper()
	r := &resilient{rec: &memRecorder{}, reg: prometheus.NewRegistry(), clock: fakeclock.New(time.Time{})}
	o.Source, o.Recorder, o.Metrics = fakeSource{s}, r.rec, NewMetrics(r.reg)
	if o.Clock == nil {
		o.Clock = r.clock
	}
	r.h = New(o)
	r.srv = httptest.NewServer(r.h)
	t.Cleanup(r.srv.Close)
	return r
}

func (r *resilient) waitEvents(t *testing.T, n int) []store.RequestEvent {
	t.Helper()
	evs := r.rec.wait(t, n)
	if len(evs) != n {
		t.Fatalf("recorded %d events, want %d: %+v", len(evs), n, evs)
	}
	return evs
}

// counter is the series' value, 0 before it exists.
func (r *resilient) counter(t *testing.T, name string, labels ...string) float64 {
	t.Helper()
	fs, err := promtest.Gather(r.reg)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := fs.Value(name, labels...)
	return v
}

// sseEvents writes n well-formed stream events and flushes.
func sseEvents(w http.ResponseWriter, n int) {
	all := []string{
		`event: message_start` + "\n" + `data: {"type":"message_start","message":{"usage":{"input_tokens":9}}}`,
		`event: content_block_start` + "\n" + `data: {"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
		`event: ping` + "\n" + `data: {"type": "ping"}`,
		`event: content_block_delta` + "\n" + `data: {"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
	}
	for _, e := range all[:n] {
		io.WriteString(w, e+"\n\n")
	}
	w.(http.Flusher).Flush()
}

// cut closes the upstream's connection without ending the response.
func cut(w http.ResponseWriter) {
	c, _, err := http.NewResponseController(w).Hijack()
	if err != nil {
		panic(http.ErrAbortHandler)
	}
	c.Close()
}

const streamBody = `{"model":"claude-test","max_tokens":5,"stream":true,"messages":[]}`

// streamRequest posts a streaming request and returns what the client read
// and the error that ended its reading (nil: a clean end).
func streamRequest(t *testing.T, url string) (*http.Response, string, error) {
	t.Helper()
	req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(streamBody))
	req.Header.Set("x-api-key", "sk-good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, rerr := io.ReadAll(resp.Body)
	return resp, string(b), rerr
}

// wantStreamError checks the client saw Anthropic's mid-stream error event
// and then a transport error instead of a clean end.
func wantStreamError(t *testing.T, body string, rerr error) {
	t.Helper()
	i := strings.Index(body, "event: error\ndata: ")
	if i < 0 {
		t.Fatalf("no error event in %q", body)
	}
	if !strings.Contains(body[i:], `{"type":"error","error":{"type":"api_error","message":"`) {
		t.Fatalf("error event not in Anthropic's shape: %q", body[i:])
	}
	if rerr == nil {
		t.Fatalf("the stream ended cleanly after the error event: %q", body)
	}
}

// An upstream cut after the first events reaches the client as
// an error event and a closed connection; the event says stream_interrupted.
func TestStreamCutEndsWithErrorEvent(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseEvents(w, 2)
		cut(w)
	}))
	defer up.Close()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{})
	resp, body, rerr := streamRequest(t, rs.srv.URL)
	if resp.StatusCode != 200 || !strings.HasPrefix(body, "event: message_start") {
		t.Fatalf("status %d body %q", resp.StatusCode, body)
	}
	wantStreamError(t, body, rerr)
	evs := rs.waitEvents(t, 1)
	if evs[0].ErrorType != "stream_interrupted" || evs[0].Status != 200 || evs[0].InputTokens != 9 {
		t.Fatalf("event %+v", evs[0])
	}
	if n := rs.counter(t, "svc_proxy_upstream_interrupted_total"); n != 1 {
		t.Fatalf("interrupted counter %v", n)
	}
}

// A non-streaming body the upstream cuts short is a 502.
func TestTruncatedBodyIs502(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", "400")
		io.WriteString(w, `{"id":"msg_1","type":"message","content":[`)
		w.(http.Flusher).Flush()
		cut(w)
	}))
	defer up.Close()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{})
	resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	wantAnthropicError(t, resp, b, 502, "api_error")
	evs := rs.waitEvents(t, 1)
	if evs[0].Status != 502 || evs[0].ErrorType != "response_truncated" || evs[0].UpstreamID != "up_1" {
		t.Fatalf("event %+v", evs[0])
	}
}

// hangingUpstream accepts requests and answers none until the test ends;
// got receives each request's arrival.
func hangingUpstream(t *testing.T, got chan<- struct{}) *httptest.Server {
	stop := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- struct{}{}
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	t.Cleanup(func() { close(stop); up.Close() })
	return up
}

// No response headers within the header timeout fails over to
// the next upstream, as a 529 does; the streaming header timeout applies.
func TestHeaderTimeoutFailsOver(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 4)
	hung := hangingUpstream(t, got)
	good := upstreamServer(t, &seen{}, nil)
	oauth := store.Upstream{ID: "up_o", Name: "o", Kind: store.KindVendorOAuth, BaseURL: hung.URL, Enabled: true,
		Credential: []byte(`{"access_token":"tok"}`), CredentialKind: "oauth"}
	rs := newResilient(t, fixture(apiKeyUpstream("up_k", good.URL, "sk-upstream"), oauth), Options{HeaderTimeout: 7 * time.Second})
	type result struct {
		resp *http.Response
		body string
		err  error
	}
	done := make(chan result, 1)
	go func() {
		resp, body, err := streamRequestNoFatal(rs.srv.URL)
		done <- result{resp, body, err}
	}()
	<-got // the subscription upstream (preferred) has the request
	if p := rs.clock.Pending(); len(p) != 1 || p[0] != 7*time.Second {
		t.Fatalf("deadlines armed %v, want the streaming header timeout", p)
	}
	rs.clock.Advance(7 * time.Second)
	res := <-done
	if res.resp == nil || res.resp.StatusCode != 200 || !strings.Contains(res.body, "message_stop") || res.err != nil {
		t.Fatalf("client got %+v", res)
	}
	evs := rs.waitEvents(t, 1)
	if evs[0].UpstreamID != "up_k" || evs[0].ErrorType != "" {
		t.Fatalf("event %+v", evs[0])
	}
	if n := rs.counter(t, "svc_proxy_upstream_timeouts_total", "phase", "headers"); n != 1 {
		t.Fatalf("header timeouts %v", n)
	}
	if n := rs.counter(t, "svc_proxy_upstream_failovers_total"); n != 1 {
		t.Fatalf("failovers %v", n)
	}
}

func streamRequestNoFatal(url string) (*http.Response, string, error) {
	req, _ := http.NewRequest("POST", url+"/v1/messages", strings.NewReader(streamBody))
	req.Header.Set("x-api-key", "sk-good")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, string(b), err
}

// The last candidate timing out is a 502 in Anthropic's shape; a
// non-streaming request waits the longer non-streaming header timeout.
func TestHeaderTimeoutLastCandidate(t *testing.T) {
	t.Parallel()
	got := make(chan struct{}, 4)
	hung := hangingUpstream(t, got)
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", hung.URL, "sk-upstream")), Options{NonStreamHeaderTimeout: 11 * time.Minute})
	done := make(chan struct{})
	var resp *http.Response
	var body string
	go func() {
		defer close(done)
		req, _ := http.NewRequest("POST", rs.srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-test","max_tokens":5}`))
		req.Header.Set("x-api-key", "sk-good")
		r, err := http.DefaultClient.Do(req)
		if err == nil {
			b, _ := io.ReadAll(r.Body)
			r.Body.Close()
			resp, body = r, string(b)
		}
	}()
	<-got
	if p := rs.clock.Pending(); len(p) != 1 || p[0] != 11*time.Minute {
		t.Fatalf("deadlines armed %v, want the non-streaming header timeout", p)
	}
	rs.clock.Advance(11 * time.Minute)
	<-done
	if resp == nil {
		t.Fatal("no response")
	}
	wantAnthropicError(t, resp, body, 502, "api_error")
	if evs := rs.waitEvents(t, 1); evs[0].ErrorType != "upstream_timeout" || evs[0].UpstreamID != "up_1" {
		t.Fatalf("event %+v", evs[0])
	}
}

// A stream from which nothing arrives within the idle deadline
// is ended as a cut one: error event, closed connection.
func TestIdleStreamEndsWithErrorEvent(t *testing.T) {
	t.Parallel()
	stop := make(chan struct{})
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseEvents(w, 1)
		select {
		case <-r.Context().Done():
		case <-stop:
		}
	}))
	defer func() { close(stop); up.Close() }()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{IdleTimeout: 3 * time.Minute})
	req, _ := http.NewRequest("POST", rs.srv.URL+"/v1/messages", strings.NewReader(streamBody))
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
	// Headers in and an event read: the deadline is the idle one, 3 minutes
	// from now (the clock has not moved), whatever the header timeout was.
	rs.clock.Advance(3*time.Minute - time.Nanosecond)
	if p := rs.clock.Pending(); len(p) != 1 || p[0] != time.Nanosecond {
		t.Fatalf("after 3 min less 1 ns the deadline is %v away, want 1ns", p)
	}
	rs.clock.Advance(time.Nanosecond)
	rest, rerr := io.ReadAll(rd)
	wantStreamError(t, string(rest), rerr)
	if !strings.Contains(string(rest), "idle deadline") {
		t.Fatalf("error event does not say why: %q", rest)
	}
	if evs := rs.waitEvents(t, 1); evs[0].ErrorType != "stream_interrupted" {
		t.Fatalf("event %+v", evs[0])
	}
	if n := rs.counter(t, "svc_proxy_upstream_timeouts_total", "phase", "idle"); n != 1 {
		t.Fatalf("idle timeouts %v", n)
	}
}

// rawRequest writes a request head and a partial body on a raw connection
// and returns the status line the server answers with, without ever
// sending the rest of the body.
func rawRequest(t *testing.T, url, head string) string {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, head)
	// Bounds a failure (the server waiting for the body) so it reports
	// instead of hanging; a pass answers at once.
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		t.Fatalf("no answer without the body: %v", err)
	}
	return strings.TrimSpace(line)
}

// A request without a key is answered without waiting for its
// body (net/http would otherwise read the unread body first).
func TestUnauthenticatedAnsweredWithoutBody(t *testing.T) {
	t.Parallel()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", "http://127.0.0.1:1", "sk-upstream")), Options{})
	head := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":"
	if got := rawRequest(t, rs.srv.URL, head); got != "HTTP/1.1 401 Unauthorized" {
		t.Fatalf("status line %q", got)
	}
	head = "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-wrong\r\nContent-Length: 1000\r\n\r\n{"
	if got := rawRequest(t, rs.srv.URL, head); got != "HTTP/1.1 401 Unauthorized" {
		t.Fatalf("status line %q", got)
	}
}

// An authenticated client that stalls its body is cut off by
// the body read deadline with a 400.
func TestStalledBodyHitsReadDeadline(t *testing.T) {
	t.Parallel()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", "http://127.0.0.1:1", "sk-upstream")), Options{BodyReadTimeout: 50 * time.Millisecond})
	head := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-good\r\nContent-Length: 1000\r\n\r\n{\"model\":"
	if got := rawRequest(t, rs.srv.URL, head); got != "HTTP/1.1 400 Bad Request" {
		t.Fatalf("status line %q", got)
	}
	if evs := rs.waitEvents(t, 1); evs[0].ErrorType != "invalid_request_error" {
		t.Fatalf("event %+v", evs[0])
	}
}

// The body read deadline is a network deadline, which the kernel's poller
// compares with the wall clock: a relay on a fake clock far from it still
// reads a body larger than the server's buffer, whose reads reach the
// connection.
func TestBodyReadDeadlineIsOnTheWallClock(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	past := fakeclock.New(time.Date(2001, 1, 1, 0, 0, 0, 0, time.UTC))
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{Clock: past, BodyReadTimeout: time.Minute})
	resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5,"pad":"`+strings.Repeat("x", 256<<10)+`"}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
}

// Past the global cap on held request bodies the relay answers
// 529 overloaded_error without reading the body; the bytes are given back.
func TestBodyMemoryCap(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{MaxBodyBytesInFlight: 1000})
	resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5,"pad":"`+strings.Repeat("x", 1200)+`"}`)
	wantAnthropicError(t, resp, b, 529, "overloaded_error")
	if resp.Header.Get("X-Should-Retry") != "true" {
		t.Fatal("529 not marked retryable")
	}
	// Refused without the body: the head alone gets the answer.
	head := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-good\r\nContent-Length: 5000\r\n\r\n{"
	if got := rawRequest(t, rs.srv.URL, head); !strings.HasPrefix(got, "HTTP/1.1 529") {
		t.Fatalf("status line %q", got)
	}
	// Two of five requests of 400 bytes fit at once; they all pass in
	// turn, so nothing leaks.
	for range 5 {
		resp, b = post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5,"pad":"`+strings.Repeat("x", 350)+`"}`)
		if resp.StatusCode != 200 {
			t.Fatalf("status %d %s", resp.StatusCode, b)
		}
	}
	if len(sn.headers) != 5 {
		t.Fatalf("upstream saw %d requests", len(sn.headers))
	}
	rs.waitEvents(t, 7)
	if n := rs.h.held.n.Load(); n != 0 {
		t.Fatalf("%d bytes still held", n)
	}
}

// A chunked body (no Content-Length) is counted as it grows.
func TestBodyMemoryCapChunked(t *testing.T) {
	t.Parallel()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", "http://127.0.0.1:1", "sk-upstream")), Options{MaxBodyBytesInFlight: 6000})
	chunk := `{"model":"claude-test","pad":"` + strings.Repeat("x", 9000) + `"}`
	head := "POST /v1/messages HTTP/1.1\r\nHost: x\r\nx-api-key: sk-good\r\nTransfer-Encoding: chunked\r\n\r\n" +
		fmt.Sprintf("%x\r\n%s\r\n", len(chunk), chunk)
	if got := rawRequest(t, rs.srv.URL, head); !strings.HasPrefix(got, "HTTP/1.1 529") {
		t.Fatalf("status line %q", got)
	}
	rs.waitEvents(t, 1)
	if n := rs.h.held.n.Load(); n != 0 {
		t.Fatalf("%d bytes still held", n)
	}
}

// fakeRefresher records what the relay asks for and answers whether a
// refresh started from started (true when it runs out).
type fakeRefresher struct {
	calls   chan string
	mu      sync.Mutex
	started []bool
}

func newFakeRefresher(started ...bool) *fakeRefresher {
	return &fakeRefresher{calls: make(chan string, 16), started: started}
}

func (f *fakeRefresher) RequestRefresh(id string) bool {
	f.calls <- id
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.started) == 0 {
		return true
	}
	ok := f.started[0]
	f.started = f.started[1:]
	return ok
}

func oauthUpstream(id, url, bundle string) store.Upstream {
	return store.Upstream{ID: id, Name: id, Kind: store.KindVendorOAuth, BaseURL: url, Enabled: true,
		Credential: []byte(bundle), CredentialKind: "oauth"}
}

// refusingUpstream answers every request with the provider's 401.
func refusingUpstream(t *testing.T, hits *atomic.Int32) *httptest.Server {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"OAuth token has expired"}}`)
	}))
	t.Cleanup(up.Close)
	return up
}

// An OAuth upstream answering 401 before the first byte makes the relay ask
// the OAuth service for a refresh, every time (the service decides whether
// one starts: one at a time, a cooldown), counts the refreshes that
// started, and fails the request over to the next upstream.
func TestOAuth401RefreshesAndFailsOver(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	refusing := refusingUpstream(t, &hits)
	good := upstreamServer(t, &seen{}, nil)
	ref := newFakeRefresher(true, false, false, true)
	rs := newResilient(t, fixture(apiKeyUpstream("up_k", good.URL, "sk-upstream"), oauthUpstream("up_o", refusing.URL, `{"access_token":"tok"}`)),
		Options{Refresher: ref})
	for range 4 {
		resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
		if resp.StatusCode != 200 || !strings.Contains(b, "msg_1") {
			t.Fatalf("status %d %s", resp.StatusCode, b)
		}
		if id := <-ref.calls; id != "up_o" {
			t.Fatalf("asked to refresh %q", id)
		}
	}
	if len(ref.calls) != 0 {
		t.Fatalf("%d extra asks", len(ref.calls))
	}
	if hits.Load() != 4 {
		t.Fatalf("the OAuth upstream was tried %d times, want every request", hits.Load())
	}
	if n := rs.counter(t, "svc_proxy_lazy_refresh_started_total"); n != 2 {
		t.Fatalf("lazy refreshes counted %v, want the 2 started", n)
	}
	for _, ev := range rs.waitEvents(t, 4) {
		if ev.UpstreamID != "up_k" || ev.Status != 200 {
			t.Fatalf("event %+v", ev)
		}
	}
}

// An OAuth token past its expiry is not sent at all: refresh, next upstream.
func TestExpiredOAuthTokenSkipped(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	refusing := refusingUpstream(t, &hits)
	good := upstreamServer(t, &seen{}, nil)
	ref := newFakeRefresher()
	bundle := fmt.Sprintf(`{"access_token":"tok","expires_at":%d}`, time.Unix(5000, 0).Unix())
	rs := newResilient(t, fixture(apiKeyUpstream("up_k", good.URL, "sk-upstream"), oauthUpstream("up_o", refusing.URL, bundle)),
		Options{Refresher: ref, Clock: fakeclock.New(time.Unix(5000, 0))})
	resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	if id := <-ref.calls; id != "up_o" {
		t.Fatalf("refreshed %q", id)
	}
	if hits.Load() != 0 {
		t.Fatal("an expired token was sent upstream")
	}
}

// The only upstream refusing its OAuth token: a retryable 503 (a refresh is
// under way), not the provider's 401, which would blame the client's key.
func TestOAuth401LastCandidate(t *testing.T) {
	t.Parallel()
	var hits atomic.Int32
	refusing := refusingUpstream(t, &hits)
	ref := newFakeRefresher()
	rs := newResilient(t, fixture(oauthUpstream("up_o", refusing.URL, `{"access_token":"tok"}`)), Options{Refresher: ref})
	resp, b := post(t, rs.srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	wantAnthropicError(t, resp, b, 503, "api_error")
	if resp.Header.Get("X-Should-Retry") != "true" {
		t.Fatal("not marked retryable")
	}
	<-ref.calls
	if evs := rs.waitEvents(t, 1); evs[0].ErrorType != "upstream_unauthorized" || evs[0].UpstreamID != "up_o" {
		t.Fatalf("event %+v", evs[0])
	}
}

// Hop-by-hop headers, those the client's Connection header
// names and client-address headers stay at the proxy; an OAuth upstream's
// rate-limit headers never reach the client, an API-key upstream's do.
func TestHeaderHygiene(t *testing.T) {
	t.Parallel()
	var got sync.Map
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got.Store(r.URL.Path, r.Header.Clone())
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Anthropic-Ratelimit-Unified-5h-Utilization", "0.93")
		w.Header().Set("Anthropic-Ratelimit-Requests-Remaining", "7")
		w.Header().Set("Request-Id", "req_1")
		w.Header().Set("Connection", "X-Upstream-Private")
		w.Header().Set("X-Upstream-Private", "secret")
		io.WriteString(w, `{"id":"msg_1","type":"message","usage":{"input_tokens":1,"output_tokens":1}}`)
	}))
	defer up.Close()
	for _, c := range []struct {
		name     string
		up       store.Upstream
		passesRL bool
	}{
		{"oauth", oauthUpstream("up_o", up.URL, `{"access_token":"tok"}`), false},
		{"api_key", apiKeyUpstream("up_k", up.URL, "sk-upstream"), true},
	} {
		rs := newResilient(t, fixture(c.up), Options{})
		req, _ := http.NewRequest("POST", rs.srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-test","max_tokens":5}`))
		req.Header.Set("x-api-key", "sk-good")
		req.Header.Set("Connection", "keep-alive, X-Secret-Hop")
		req.Header.Set("X-Secret-Hop", "1")
		req.Header.Set("X-Forwarded-For", "10.0.0.7")
		req.Header.Set("Forwarded", "for=10.0.0.7")
		req.Header.Set("X-Real-IP", "10.0.0.7")
		req.Header.Set("Via", "1.1 corp-proxy")
		req.Header.Set("Te", "trailers")
		req.Header.Set("Anthropic-Version", "2023-06-01")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		v, _ := got.Load("/v1/messages")
		h := v.(http.Header)
		for _, k := range []string{"X-Secret-Hop", "X-Forwarded-For", "Forwarded", "X-Real-Ip", "Via", "Te"} {
			if h.Get(k) != "" {
				t.Errorf("%s: %s forwarded upstream", c.name, k)
			}
		}
		if h.Get("Anthropic-Version") != "2023-06-01" {
			t.Errorf("%s: anthropic-version lost", c.name)
		}
		if resp.Header.Get("X-Upstream-Private") != "" {
			t.Errorf("%s: header named in the upstream's Connection passed on", c.name)
		}
		if resp.Header.Get("Request-Id") != "req_1" {
			t.Errorf("%s: request-id lost", c.name)
		}
		for _, k := range []string{"Anthropic-Ratelimit-Unified-5h-Utilization", "Anthropic-Ratelimit-Requests-Remaining"} {
			if (resp.Header.Get(k) != "") != c.passesRL {
				t.Errorf("%s: %s present=%v", c.name, k, resp.Header.Get(k) != "")
			}
		}
	}
}

func TestConnectionNames(t *testing.T) {
	t.Parallel()
	conn := []string{"keep-alive,  X-A ", "x-b"}
	for k, want := range map[string]bool{"Keep-Alive": true, "X-A": true, "X-B": true, "X-C": false, "X": false} {
		if connectionNames(conn, k) != want {
			t.Errorf("%s: want %v", k, want)
		}
	}
	if connectionNames(nil, "X-A") {
		t.Error("no Connection header names nothing")
	}
}

// panickingLimiter breaks inside the checks before dispatch.
type panickingLimiter struct{}

func (panickingLimiter) AdmitStatus(string, []limits.Limit, *limits.Status) *limits.Refusal {
	panic("limiter broke")
}

// A panic in the checks before dispatch, after the body was read and
// reserved (net/http recovers it and drops the connection), still gives
// the body's bytes back to the global cap: else each such request would
// shrink the cap for good.
func TestBodyBytesGivenBackAfterAPanic(t *testing.T) {
	t.Parallel()
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://127.0.0.1:1", "sk-upstream"))
	cfg.Principals[0].DefaultLimits = json.RawMessage(`[{"kind":"requests","window_secs":60,"max":2}]`)
	rs := newResilient(t, snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0)), Options{Limiter: panickingLimiter{}, MaxBodyBytesInFlight: 100_000})
	rs.srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	for range 3 {
		req, _ := http.NewRequest("POST", rs.srv.URL+"/v1/messages",
			strings.NewReader(`{"model":"claude-test","max_tokens":5,"pad":"`+strings.Repeat("x", 500)+`"}`))
		req.Header.Set("x-api-key", "sk-good")
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			t.Fatalf("answered %d; want the connection dropped by the panic", resp.StatusCode)
		}
	}
	if n := rs.h.held.n.Load(); n != 0 {
		t.Fatalf("%d bytes still held after the panics", n)
	}
}

// Every error answer of the proxy path goes through one writer, so every
// one is counted by status, an unknown path and a wrong method included
// (they once were answered without being counted).
func TestEveryErrorAnswerCounted(t *testing.T) {
	t.Parallel()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", "http://127.0.0.1:1", "sk-upstream")), Options{})
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{http.MethodGet, "/v1/nothing", 404},
		{http.MethodGet, "/v1/messages", 405},
		{http.MethodPost, "/v1/models", 405},
		{http.MethodPost, "/v1/messages", 401},
	} {
		req, _ := http.NewRequest(c.method, rs.srv.URL+c.path, nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || resp.Header.Get("X-Should-Retry") != "false" {
			t.Fatalf("%s %s: %d x-should-retry %q", c.method, c.path, resp.StatusCode, resp.Header.Get("X-Should-Retry"))
		}
	}
	for code, want := range map[string]float64{"404": 1, "405": 2, "401": 1} {
		if got := rs.counter(t, "svc_proxy_requests_total", "code", code); got != want {
			t.Errorf("svc_proxy_requests_total{code=%q} = %v, want %v", code, got, want)
		}
	}
}
