package proxyerr

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"
)

// Every constructor answers with Anthropic's status and type for its
// kind, in Anthropic's error shape, and tells the SDKs to retry only an
// overload or an unavailable service.
func TestConstructorsAnswerInAnthropicShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		e      *Error
		status int
		body   string
		retry  string
	}{
		{InvalidRequest("model: field required"), 400, `{"type":"error","error":{"type":"invalid_request_error","message":"model: field required"}}`, "false"},
		{Authentication("invalid API key"), 401, `{"type":"error","error":{"type":"authentication_error","message":"invalid API key"}}`, "false"},
		{Billing("no credit"), 402, `{"type":"error","error":{"type":"billing_error","message":"no credit"}}`, "false"},
		{Permission("principal is disabled"), 403, `{"type":"error","error":{"type":"permission_error","message":"principal is disabled"}}`, "false"},
		{NotFound("no such endpoint: /x"), 404, `{"type":"error","error":{"type":"not_found_error","message":"no such endpoint: /x"}}`, "false"},
		{TooLarge("request body exceeds 32 MB"), 413, `{"type":"error","error":{"type":"request_too_large","message":"request body exceeds 32 MB"}}`, "false"},
		{API(502, "upstream unreachable"), 502, `{"type":"error","error":{"type":"api_error","message":"upstream unreachable"}}`, "false"},
		{API(503, "no upstream"), 503, `{"type":"error","error":{"type":"api_error","message":"no upstream"}}`, "true"},
		{Timeout("too slow"), 504, `{"type":"error","error":{"type":"timeout_error","message":"too slow"}}`, "false"},
		{Overloaded("busy"), 529, `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`, "true"},
		{New(418, "teapot_error", "short and stout"), 418, `{"type":"error","error":{"type":"teapot_error","message":"short and stout"}}`, "false"},
		{API(503, "revoked").WithRetry(false), 503, `{"type":"error","error":{"type":"api_error","message":"revoked"}}`, "false"},
	}
	for _, c := range cases {
		rec := httptest.NewRecorder()
		c.e.Write(rec, false)
		if rec.Code != c.status || rec.Body.String() != c.body {
			t.Errorf("%s: %d %s, want %d %s", c.e.Type, rec.Code, rec.Body, c.status, c.body)
		}
		h := rec.Header()
		if h.Get("Content-Type") != "application/json" || h.Get("Content-Length") != strconv.Itoa(len(c.body)) {
			t.Errorf("%s: headers %v", c.e.Type, h)
		}
		if h.Get("X-Should-Retry") != c.retry || c.e.ShouldRetry() != (c.retry == "true") {
			t.Errorf("%s (%d): x-should-retry %q, want %q", c.e.Type, c.status, h.Get("X-Should-Retry"), c.retry)
		}
		if _, ok := h["Retry-After"]; ok {
			t.Errorf("%s: Retry-After without a wait", c.e.Type)
		}
	}
}

// A message is JSON-escaped as encoding/json escapes it (quotes, control
// characters, HTML), so a client's text cannot break the shape.
func TestMessageEscaped(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	InvalidRequest("model \"a<b>&\"\n").Write(rec, false)
	want := `{"type":"error","error":{"type":"invalid_request_error","message":"model \"a\u003cb\u003e\u0026\"\n"}}`
	if rec.Body.String() != want {
		t.Fatalf("body %s, want %s", rec.Body, want)
	}
}

// A rate limit carries Retry-After in whole seconds rounded up; the SDKs
// are told to retry only when they would wait that long (a minute).
func TestRateLimitedRetryAfter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		wait        time.Duration
		after, retr string
	}{
		{1200 * time.Millisecond, "2", "true"},
		{MaxClientRetryWait, "60", "true"},
		{MaxClientRetryWait + time.Millisecond, "61", "false"},
	} {
		rec := httptest.NewRecorder()
		e := RateLimited("slow down", c.wait)
		e.Write(rec, false)
		if rec.Code != 429 || rec.Header().Get("Retry-After") != c.after || rec.Header().Get("X-Should-Retry") != c.retr {
			t.Errorf("wait %v: %d retry-after %q x-should-retry %q", c.wait, rec.Code, rec.Header().Get("Retry-After"), rec.Header().Get("X-Should-Retry"))
		}
		if w, ok := e.RetryAfter(); !ok || w != c.wait {
			t.Errorf("RetryAfter %v %v", w, ok)
		}
	}
}

// A 405 names the method it refuses and the one allowed, in Allow too.
func TestMethodNotAllowed(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	MethodNotAllowed("GET", http.MethodPost).Write(rec, false)
	if rec.Code != 405 || rec.Header().Get("Allow") != "POST" ||
		rec.Body.String() != `{"type":"error","error":{"type":"invalid_request_error","message":"method GET is not allowed; use POST"}}` {
		t.Fatalf("%d %v %s", rec.Code, rec.Header(), rec.Body)
	}
}

// Once a stream has started, the error is the stream's error event,
// flushed at once; no status or header is touched (they went out).
func TestWriteInStartedStream(t *testing.T) {
	t.Parallel()
	rec := httptest.NewRecorder()
	rec.WriteHeader(200)
	API(502, "the upstream stream was cut").WithCode("stream_interrupted").Write(rec, true)
	want := "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"the upstream stream was cut\"}}\n\n"
	if rec.Body.String() != want || !rec.Flushed || rec.Code != 200 {
		t.Fatalf("%d flushed=%v %q", rec.Code, rec.Flushed, rec.Body)
	}
	if len(rec.Header()) != 0 {
		t.Fatalf("headers set in a started stream: %v", rec.Header())
	}
}

// The request event records the error's code, its type when it has none.
func TestEventCode(t *testing.T) {
	t.Parallel()
	if c := Permission("no").EventCode(); c != TypePermission {
		t.Fatalf("code %q", c)
	}
	if c := API(502, "late").WithCode("upstream_timeout").EventCode(); c != "upstream_timeout" {
		t.Fatalf("code %q", c)
	}
}
