package relay

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/usage"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

func TestScanRequest(t *testing.T) {
	t.Parallel()
	cases := []struct {
		in     string
		model  string
		stream bool
		bad    bool
	}{
		{in: `{"model":"claude-x","max_tokens":5}`, model: "claude-x"},
		{in: ` { "messages":[{"role":"user","content":"a \"model\": \"no\" }"}], "stream" : true , "model" : "m1" } `, model: "m1", stream: true},
		{in: `{"stream":false,"model":"a\u0062c"}`, model: "abc"},
		{in: `{"metadata":{"model":"inner"},"model":"outer","stream":false}`, model: "outer"},
		{in: `{"x":[1,2,{"y":"}"}],"model":"m"}`, model: "m"},
		{in: `{}`, model: ""},
		{in: `[]`, bad: true},
		{in: `{"model":"m"`, bad: true},
		{in: `{"model":5}`, bad: true},
		{in: ``, bad: true},
		{in: `{"model":"m",}`, bad: true},
	}
	for _, c := range cases {
		m, s, err := scanRequest([]byte(c.in))
		if c.bad {
			if err == nil {
				t.Errorf("%q: no error", c.in)
			}
			continue
		}
		if err != nil || m != c.model || s != c.stream {
			t.Errorf("%q: got (%q, %v, %v), want (%q, %v)", c.in, m, s, err, c.model, c.stream)
		}
	}
}

// A model named again is the string scanned before: no allocation, and
// never another name's (the body's bytes are overwritten between scans,
// as a pooled buffer's are).
func TestScanRequestInternsModel(t *testing.T) {
	body := []byte(`{"model":"claude-intern-test","max_tokens":5}`)
	first, _, _ := scanRequest(body)
	if allocs := testing.AllocsPerRun(100, func() {
		if m, _, _ := scanRequest(body); m != first {
			t.Fatalf("model %q, want %q", m, first)
		}
	}); allocs != 0 {
		t.Fatalf("scanning a model named before allocated %v times", allocs)
	}
	copy(body[10:], "claude-intern-tesT")
	if m, _, _ := scanRequest(body); m != "claude-intern-tesT" || first != "claude-intern-test" {
		t.Fatalf("after the buffer changed: model %q, the first %q", m, first)
	}
	for _, name := range []string{"a", "ab", "b", "ba", "claude-intern-test"} {
		if got := internModel([]byte(name)); got != name {
			t.Fatalf("internModel(%q) = %q", name, got)
		}
	}
	// A name past the bound is copied, never kept in the table.
	long := bytes.Repeat([]byte("m"), maxInterned+1)
	if got := internModel(long); got != string(long) {
		t.Fatalf("long name came back as %d bytes", len(got))
	}
	for i := range models {
		if p := models[i].Load(); p != nil && len(*p) > maxInterned {
			t.Fatalf("slot %d keeps a %d-byte name", i, len(*p))
		}
	}
}

func TestSSETapKeepsOnlyUsageLines(t *testing.T) {
	t.Parallel()
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":11}}}\n\n" +
		"event: ping\ndata: {\"type\":\"ping\"}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"" + strings.Repeat("x", 500) + "\"}}\n\n" +
		"event: message_delta\ndata: {\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":7},\"type\":\"message_delta\"}\r\n\r\n"
	// Feed in every chunk size to prove lines split across reads are joined.
	for size := 1; size <= len(stream); size += 7 {
		var tap sseTap
		for i := 0; i < len(stream); i += size {
			tap.feed([]byte(stream[i:min(i+size, len(stream))]))
		}
		if len(tap.lines) != 2 {
			t.Fatalf("chunk %d: kept %d lines: %q", size, len(tap.lines), tap.lines)
		}
		p := usage.Pending{SSE: tap.lines}
		usage.Extract(&p)
		if p.Event.InputTokens != 11 || p.Event.OutputTokens != 7 {
			t.Fatalf("chunk %d: usage %+v", size, p.Event)
		}
	}
}

type fakeSource struct{ s *snapshot.Snapshot }

func (f fakeSource) Current() *snapshot.Snapshot { return f.s }

type memRecorder struct {
	mu  sync.Mutex
	evs []store.RequestEvent
}

func (m *memRecorder) Record(p usage.Pending) {
	usage.Extract(&p)
	m.mu.Lock()
	m.evs = append(m.evs, p.Event)
	m.mu.Unlock()
}

// wait returns the events once there are n: a relayed answer reaches the
// client before its event is handed over, so a test that has read the
// answer waits for the event.
func (m *memRecorder) wait(t *testing.T, n int) []store.RequestEvent {
	t.Helper()
	waitfor.Until(t, fmt.Sprintf("%d request events", n), func() error {
		if got := len(m.events()); got < n {
			return fmt.Errorf("%d recorded", got)
		}
		return nil
	})
	return m.events()
}

func (m *memRecorder) events() []store.RequestEvent {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]store.RequestEvent(nil), m.evs...)
}

type plainOpener struct{}

func (plainOpener) Open(ct, _ []byte) ([]byte, error) { return ct, nil }

// fixture builds a snapshot with one principal (key "sk-good"), a disabled
// principal (key "sk-off"), and the given upstreams.
func fixture(ups ...store.Upstream) *snapshot.Snapshot {
	return snapshot.Build(fixtureConfig(ups...), plainOpener{}, time.Unix(0, 0))
}

// fixtureConfig is fixture's configuration, for tests that extend it.
func fixtureConfig(ups ...store.Upstream) *store.Config {
	cfg := &store.Config{
		Generation: 1,
		Upstreams:  ups,
		Principals: []store.Principal{
			{ID: "pr_a", Name: "a", Kind: "machine", Enabled: true, AllowedModels: []string{"claude-*"}},
			{ID: "pr_off", Name: "off", Kind: "machine", Enabled: false, AllowedModels: []string{"*"}},
		},
	}
	builtin := store.BuiltinSubscriptionPreference
	cfg.Chains = []store.ChainEntry{{ID: "ce_1", PrincipalID: "pr_a", Slot: "router", Builtin: &builtin, Enabled: true}}
	for _, k := range []struct{ id, pid, key string }{{"key_a", "pr_a", "sk-good"}, {"key_off", "pr_off", "sk-off"}} {
		h := sha256.Sum256([]byte(k.key))
		cfg.Keys = append(cfg.Keys, store.Key{ID: k.id, PrincipalID: k.pid, Hash: h[:]})
	}
	return cfg
}

func apiKeyUpstream(id, url, key string) store.Upstream {
	return store.Upstream{ID: id, Name: id, Kind: store.KindVendorAPIKey, BaseURL: url, Enabled: true, Credential: []byte(key), CredentialKind: "api_key"}
}

type seen struct {
	mu      sync.Mutex
	headers []http.Header
	queries []string
}

func (s *seen) add(r *http.Request) {
	s.mu.Lock()
	s.headers = append(s.headers, r.Header.Clone())
	s.queries = append(s.queries, r.URL.RawQuery)
	s.mu.Unlock()
}

// refusingURL is an upstream that refuses connections. Port 1 is
// privileged and outside the ephemeral range, so no test server and no
// outbound connection is ever given it. A closed test server's address is
// no such place: the kernel hands its port to the next listener, often
// another parallel test's upstream, which then counts a request it never
// expected.
const refusingURL = "http://127.0.0.1:1"

// upstreamServer answers like a provider: JSON or an SSE stream whose events
// are released one by one through the returned channel when gate is set.
func upstreamServer(t *testing.T, sn *seen, gate chan struct{}) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sn.add(r)
		if r.Header.Get("X-Api-Key") != "sk-upstream" {
			w.WriteHeader(401)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error","message":"bad key"}}`)
			return
		}
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/messages/count_tokens" {
			io.WriteString(w, `{"input_tokens":3}`)
			return
		}
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_1","type":"message","usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":4}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		f := w.(http.Flusher)
		events := []string{
			`{"type":"message_start","message":{"usage":{"input_tokens":9,"cache_creation_input_tokens":2}}}`,
			`{"type":"content_block_delta","delta":{"type":"text_delta","text":"hi"}}`,
			`{"type":"message_delta","usage":{"output_tokens":3}}`,
			`{"type":"message_stop"}`,
		}
		for _, e := range events {
			if gate != nil {
				<-gate
			}
			var typ struct{ Type string }
			json.Unmarshal([]byte(e), &typ)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, e)
			f.Flush()
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newTestHandler(s *snapshot.Snapshot, rec Recorder) *httptest.Server {
	h := New(Options{Source: fakeSource{s}, Recorder: rec})
	return httptest.NewServer(h)
}

func post(t *testing.T, url string, hdr map[string]string, body string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

func wantAnthropicError(t *testing.T, resp *http.Response, body string, status int, typ string) {
	t.Helper()
	if resp.StatusCode != status {
		t.Fatalf("status %d, want %d (%s)", resp.StatusCode, status, body)
	}
	var e struct {
		Type  string `json:"type"`
		Error struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Type != "error" || e.Error.Type != typ || e.Error.Message == "" {
		t.Fatalf("body %s: want Anthropic error of type %s", body, typ)
	}
}

// P-LISTEN-1: the proxy path authenticates, checks models and relays.
func TestRelayRefusals(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), nil)
	defer srv.Close()
	body := `{"model":"claude-test","max_tokens":5,"messages":[]}`

	resp, b := post(t, srv.URL+"/v1/messages", nil, body)
	wantAnthropicError(t, resp, b, 401, "authentication_error")
	resp, b = post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-wrong"}, body)
	wantAnthropicError(t, resp, b, 401, "authentication_error")
	resp, b = post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-off"}, body)
	wantAnthropicError(t, resp, b, 403, "permission_error")
	resp, b = post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"gpt-4","max_tokens":5}`)
	wantAnthropicError(t, resp, b, 403, "permission_error")
	resp, b = post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `not json`)
	wantAnthropicError(t, resp, b, 400, "invalid_request_error")
	resp, b = post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"max_tokens":5}`)
	wantAnthropicError(t, resp, b, 400, "invalid_request_error")
	resp, b = post(t, srv.URL+"/v1/complete", map[string]string{"x-api-key": "sk-good"}, body)
	wantAnthropicError(t, resp, b, 404, "not_found_error")
	if len(sn.headers) != 0 {
		t.Fatalf("refused requests reached the upstream %d times", len(sn.headers))
	}

	// No usable upstream: 503 in Anthropic's shape.
	empty := newTestHandler(fixture(), nil)
	defer empty.Close()
	resp, b = post(t, empty.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, body)
	wantAnthropicError(t, resp, b, 503, "api_error")
}

func TestRelaySwapsCredentialAndPassesHeaders(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), rec)
	defer srv.Close()

	for _, auth := range []map[string]string{
		{"x-api-key": "sk-good"},
		{"Authorization": "Bearer sk-good"},
	} {
		hdr := map[string]string{"anthropic-version": "2023-06-01", "anthropic-beta": "prompt-caching-2024-07-31"}
		for k, v := range auth {
			hdr[k] = v
		}
		resp, b := post(t, srv.URL+"/v1/messages?beta=true", hdr, `{"model":"claude-test","max_tokens":5,"messages":[]}`)
		if resp.StatusCode != 200 || !strings.Contains(b, `"msg_1"`) {
			t.Fatalf("status %d body %s", resp.StatusCode, b)
		}
	}
	if len(sn.headers) != 2 {
		t.Fatalf("upstream saw %d requests", len(sn.headers))
	}
	for i, h := range sn.headers {
		if h.Get("X-Api-Key") != "sk-upstream" || h.Get("Authorization") != "" {
			t.Fatalf("request %d: client credential leaked or upstream credential missing: %v", i, h)
		}
		if h.Get("Anthropic-Version") != "2023-06-01" || h.Get("Anthropic-Beta") != "prompt-caching-2024-07-31" {
			t.Fatalf("request %d: anthropic headers not passed through: %v", i, h)
		}
		if sn.queries[i] != "beta=true" {
			t.Fatalf("query %q not passed through", sn.queries[i])
		}
	}
	resp, b := post(t, srv.URL+"/v1/messages/count_tokens", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","messages":[]}`)
	if resp.StatusCode != 200 || b != `{"input_tokens":3}` {
		t.Fatalf("count_tokens: %d %s", resp.StatusCode, b)
	}
	evs := rec.wait(t, 3)
	if len(evs) != 3 || evs[0].InputTokens != 5 || evs[0].OutputTokens != 2 || evs[0].CacheReadInputTokens != 4 || evs[0].UpstreamID != "up_1" || evs[0].KeyID != "key_a" {
		t.Fatalf("events %+v", evs)
	}
}

// Streaming: every event reaches the client before the upstream sends the
// next one, so nothing is buffered.
func TestRelayStreamsEventByEvent(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	gate := make(chan struct{}, 1)
	up := upstreamServer(t, sn, gate)
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), rec)
	defer srv.Close()

	req, _ := http.NewRequest("POST", srv.URL+"/v1/messages", strings.NewReader(`{"model":"claude-test","max_tokens":5,"stream":true,"messages":[]}`))
	req.Header.Set("x-api-key", "sk-good")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gate <- struct{}{} // release message_start so headers arrive
	resp, err := http.DefaultClient.Do(req.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	rd := bufio.NewReader(resp.Body)
	readEvent := func() string {
		var ev string
		for {
			line, err := rd.ReadString('\n')
			if err != nil {
				t.Fatalf("read: %v", err)
			}
			if line == "\n" {
				return ev
			}
			if strings.HasPrefix(line, "event: ") {
				ev = strings.TrimSpace(strings.TrimPrefix(line, "event: "))
			}
		}
	}
	want := []string{"message_start", "content_block_delta", "message_delta", "message_stop"}
	for i, w := range want {
		if i > 0 {
			gate <- struct{}{} // the next event is only produced now
		}
		if got := readEvent(); got != w {
			t.Fatalf("event %d = %q, want %q", i, got, w)
		}
	}
	io.Copy(io.Discard, resp.Body)
	evs := rec.wait(t, 1)
	if len(evs) != 1 || !evs[0].Stream || evs[0].InputTokens != 9 || evs[0].OutputTokens != 3 || evs[0].CacheCreationInputTokens != 2 {
		t.Fatalf("events %+v", evs)
	}
}

// A rate-limited first upstream makes the relay fall over to the next
// candidate without failing the client's request.
func TestRelayFailsOverOn429(t *testing.T) {
	t.Parallel()
	var hits sync.Map
	limited := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Store("limited", true)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(429)
		io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`)
	}))
	defer limited.Close()
	sn := &seen{}
	good := upstreamServer(t, sn, nil)
	oauth := store.Upstream{ID: "up_o", Name: "o", Kind: store.KindVendorOAuth, BaseURL: limited.URL, Enabled: true,
		Credential: []byte(`{"access_token":"tok"}`), CredentialKind: "oauth"}
	srv := newTestHandler(fixture(apiKeyUpstream("up_k", good.URL, "sk-upstream"), oauth), nil)
	defer srv.Close()
	resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
	if resp.StatusCode != 200 {
		t.Fatalf("status %d %s", resp.StatusCode, b)
	}
	if _, ok := hits.Load("limited"); !ok {
		t.Fatal("the subscription upstream was not preferred")
	}
}

// Refusals after authentication are recorded for the principal; a request
// without a valid key is not (there is no principal to record).
func TestRefusalsAreRecorded(t *testing.T) {
	t.Parallel()
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", "http://127.0.0.1:1", "sk-upstream")), rec)
	defer srv.Close()
	hdr := map[string]string{"x-api-key": "sk-good", "anthropic-version": "2023-06-01"}
	if resp, b := post(t, srv.URL+"/v1/messages", hdr, `{"model":"gpt-4o","max_tokens":5,"messages":[]}`); resp.StatusCode != 403 {
		t.Fatalf("disallowed model: %d %s", resp.StatusCode, b)
	}
	if resp, _ := post(t, srv.URL+"/v1/messages", hdr, `{"max_tokens":5}`); resp.StatusCode != 400 {
		t.Fatalf("no model: %d", resp.StatusCode)
	}
	if resp, _ := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-bad"}, `{"model":"claude-test"}`); resp.StatusCode != 401 {
		t.Fatalf("bad key: %d", resp.StatusCode)
	}
	evs := rec.wait(t, 2)
	if len(evs) != 2 {
		t.Fatalf("recorded %d events, want 2: %+v", len(evs), evs)
	}
	byStatus := map[int]store.RequestEvent{}
	for _, e := range evs {
		byStatus[e.Status] = e
	}
	if e := byStatus[403]; e.PrincipalID != "pr_a" || e.KeyID != "key_a" || e.Model != "gpt-4o" || e.ErrorType != "permission_error" || e.UpstreamID != "" {
		t.Fatalf("403 event %+v", e)
	}
	if e := byStatus[400]; e.ErrorType != "invalid_request_error" {
		t.Fatalf("400 event %+v", e)
	}
}
