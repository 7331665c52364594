package relay

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// A top-level key named twice, however it is spelt, is refused: the
// scanner and a standard decoder (which keeps the last) would otherwise
// read different models or stream flags. A key spelt with escapes is the
// key it decodes to.
func TestScanRequestKeysAsADecoderReadsThem(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in     string
		model  string
		stream bool
		bad    string // a part of the error's message
	}{
		{in: `{"model":"claude-sonnet-4-5","mod\u0065l":"claude-opus-4-1","max_tokens":5}`, bad: `"model" twice`},
		{in: `{"mod\u0065l":"claude-opus-4-1","model":"claude-sonnet-4-5"}`, bad: `"model" twice`},
		{in: `{"model":"a","model":"b"}`, bad: `"model" twice`},
		{in: `{"\u006d\u006F\u0064\u0065\u006c":"a","model":"a"}`, bad: `"model" twice`},
		{in: `{"model":"a","stream":false,"stre\u0061m":true}`, bad: `"stream" twice`},
		{in: `{"model":"a","max_tokens":5,"max_tokens":6}`, bad: `"max_tokens" twice`},
		{in: `{"model":"a","metadata":{"user_id":"x"},"meta\u0064ata":{}}`, bad: `"metadata" twice`},
		{in: `{"model":"a","s\u00fcd":1,"s` + "\u00fc" + `d":2}`, bad: "twice"},
		// Escaped keys alone are read as what they decode to.
		{in: `{"mod\u0065l":"claude-x","stre\u0061m":true}`, model: "claude-x", stream: true},
		{in: `{"model":"claude-x","stre\u0061m":false}`, model: "claude-x"},
		// Escaped values are decoded as JSON decodes them.
		{in: `{"model":"claude-\ud83d\ude00"}`, model: "claude-\U0001F600"},
		{in: `{"model":"claude-\u00e9"}`, model: "claude-é"},
		{in: `{"model":"claude-\/x"}`, model: "claude-/x"},
		// What JSON does not define, or would decode to something other
		// than what was sent, is refused rather than guessed at.
		{in: `{"model":"claude-\x41"}`, bad: "model"},
		{in: `{"model":"claude-\ud800"}`, bad: "model"},
		{in: `{"model":"claude-\udc00\ud800"}`, bad: "model"},
		{in: "{\"model\":\"claude-\tx\"}", bad: "model"},
		{in: `{"mod\x65l":"a"}`, bad: "JSON object"},
		{in: "{\"mod\xffl\":\"a\",\"mod\xfel\":\"b\"}", bad: "JSON object"},
		{in: `{"\ud800":1,"model":"a"}`, bad: "JSON object"},
		// stream is a boolean (null: not given, as a decoder reads it).
		{in: `{"model":"a","stream":null}`, model: "a"},
		{in: `{"model":"a","stream":"true"}`, bad: "stream"},
		{in: `{"model":"a","stream":1}`, bad: "stream"},
		{in: `{"model":"a","stream":tru}`, bad: "stream"},
		// Nested keys are the upstream's business, not the scanner's.
		{in: `{"model":"a","metadata":{"model":"b","model":"c"}}`, model: "a"},
	} {
		m, s, err := scanRequest([]byte(c.in))
		if c.bad != "" {
			if err == nil || !strings.Contains(err.Error(), c.bad) {
				t.Errorf("%s: got (%q, %v, %v), want an error naming %s", c.in, m, s, err, c.bad)
			}
			continue
		}
		if err != nil || m != c.model || s != c.stream {
			t.Errorf("%s: got (%q, %v, %v), want (%q, %v)", c.in, m, s, err, c.model, c.stream)
		}
	}
}

// The allowed_models bypass: a body naming model twice is refused before
// anything is sent upstream, on every endpoint and whether streamed or
// not, and recorded as a refusal that carries no model, no upstream and no
// tokens (nothing to meter or budget).
func TestRelayRefusesDuplicateKeys(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), rec)
	defer srv.Close()
	hdr := map[string]string{"x-api-key": "sk-good", "anthropic-version": "2023-06-01"}
	bodies := []string{
		`{"model":"claude-test","mod\u0065l":"gpt-4","max_tokens":5,"messages":[]}`,
		`{"model":"claude-test","mod\u0065l":"gpt-4","max_tokens":5,"stream":true,"messages":[]}`,
		`{"mod\u0065l":"gpt-4","model":"claude-test","max_tokens":5,"stream":true,"messages":[]}`,
		`{"model":"claude-test","max_tokens":5,"stream":false,"stre\u0061m":true,"messages":[]}`,
		`{"model":"claude-test","max_tokens":5,"max_tokens":500000,"messages":[]}`,
	}
	n := 0
	for _, path := range []string{"/v1/messages", "/v1/messages/count_tokens"} {
		for _, body := range bodies {
			resp, b := post(t, srv.URL+path, hdr, body)
			wantAnthropicError(t, resp, b, http.StatusBadRequest, "invalid_request_error")
			if !strings.Contains(b, "twice") {
				t.Errorf("%s %s: message %s does not say a key is named twice", path, body, b)
			}
			n++
		}
	}
	if len(sn.headers) != 0 {
		t.Fatalf("refused requests reached the upstream %d times", len(sn.headers))
	}
	evs := rec.wait(t, n)
	if len(evs) != n {
		t.Fatalf("recorded %d events, want %d", len(evs), n)
	}
	for _, e := range evs {
		if e.Status != http.StatusBadRequest || e.ErrorType != "invalid_request_error" || e.PrincipalID != "pr_a" ||
			e.Model != "" || e.UpstreamID != "" || e.InputTokens != 0 || e.OutputTokens != 0 || e.Stream {
			t.Fatalf("event %+v", e)
		}
	}
}

// An escaped key alone is the key it decodes to: the principal's
// allowed_models applies to the model a decoder reads, and a stream asked
// for through an escaped key is recorded as one.
func TestRelayReadsEscapedKeys(t *testing.T) {
	t.Parallel()
	sn := &seen{}
	up := upstreamServer(t, sn, nil)
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), rec)
	defer srv.Close()
	hdr := map[string]string{"x-api-key": "sk-good"}
	resp, b := post(t, srv.URL+"/v1/messages", hdr, `{"mod\u0065l":"gpt-4","max_tokens":5,"messages":[]}`)
	wantAnthropicError(t, resp, b, http.StatusForbidden, "permission_error")
	if len(sn.headers) != 0 {
		t.Fatalf("a disallowed model reached the upstream")
	}
	resp, b = post(t, srv.URL+"/v1/messages", hdr, `{"mod\u0065l":"claude-test","max_tokens":5,"messages":[]}`)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("escaped model key: %d %s", resp.StatusCode, b)
	}
	evs := rec.wait(t, 2)
	byStatus := map[int]store.RequestEvent{}
	for _, e := range evs {
		byStatus[e.Status] = e
	}
	if e := byStatus[http.StatusForbidden]; e.Model != "gpt-4" || e.ErrorType != "permission_error" {
		t.Fatalf("403 event %+v", e)
	}
	if e := byStatus[http.StatusOK]; e.Model != "claude-test" || e.UpstreamID != "up_1" {
		t.Fatalf("200 event %+v", e)
	}
}
