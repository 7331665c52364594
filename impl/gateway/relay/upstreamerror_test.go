package relay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/usage"
)

const upstreamErrorEvent = "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n"

// A stream the upstream ends with its own error event is passed on as it
// is, and recorded as what it is: the error type of the event (with the
// 200 the client got), counted as an upstream error of its class.
func TestUpstreamErrorEventRecorded(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sseEvents(w, 2)
		io.WriteString(w, upstreamErrorEvent)
	}))
	defer up.Close()
	rs := newResilient(t, fixture(apiKeyUpstream("up_1", up.URL, "sk-upstream")), Options{})
	resp, body, rerr := streamRequest(t, rs.srv.URL)
	if resp.StatusCode != 200 || rerr != nil || !strings.HasSuffix(body, upstreamErrorEvent) {
		t.Fatalf("status %d, error %v, body %q: want the upstream's error event passed on unchanged", resp.StatusCode, rerr, body)
	}
	if strings.Count(body, "event: error") != 1 {
		t.Fatalf("the proxy added an error event of its own: %q", body)
	}
	ev := rs.waitEvents(t, 1)[0]
	if ev.ErrorType != "overloaded_error" || ev.Status != 200 || ev.UpstreamID != "up_1" || ev.InputTokens != 9 {
		t.Fatalf("event %+v: want error_type overloaded_error, status 200, the usage read", ev)
	}
	if n := rs.counter(t, "svc_proxy_upstream_errors_total", "upstream", "up_1", "class", "529"); n != 1 {
		t.Fatalf("svc_proxy_upstream_errors_total{class=529} = %v, want 1", n)
	}
	if n := rs.counter(t, "svc_proxy_upstream_interrupted_total"); n != 0 {
		t.Fatalf("counted as an interruption (%v): the upstream ended its stream itself", n)
	}
}

// The class of an upstream error event follows its type as the class of an
// error status does.
func TestErrorEventClass(t *testing.T) {
	t.Parallel()
	for typ, want := range map[string]ErrorClass{
		"overloaded_error": ErrOverloaded, "rate_limit_error": ErrRateLimited, "api_error": Err5xx,
		"authentication_error": ErrAuth, "permission_error": ErrAuth, "invalid_request_error": ErrProtocol,
		"upstream_error": ErrProtocol,
	} {
		if got := errorEventClass(typ); got != want {
			t.Errorf("%s: class %s, want %s", typ, errorClassNames[got], errorClassNames[want])
		}
	}
}

// The tap keeps the data line of an error event (only that of an error
// event) however the stream is split into reads, and leaves the usage
// lines as they were.
func TestSSETapKeepsErrorEvent(t *testing.T) {
	t.Parallel()
	stream := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":11}}}\n\n" +
		"event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"an error: event: error\"}}\n\n" +
		"event:error\r\ndata: {\"type\":\"error\",\"error\":{\"type\":\"api_error\",\"message\":\"Internal server error\"}}\r\n\r\n"
	for size := 1; size <= len(stream); size++ {
		var tap sseTap
		for i := 0; i < len(stream); i += size {
			tap.feed([]byte(stream[i:min(i+size, len(stream))]))
		}
		if string(tap.errData) != `data: {"type":"error","error":{"type":"api_error","message":"Internal server error"}}` {
			t.Fatalf("chunk %d: error line %q", size, tap.errData)
		}
		if len(tap.lines) != 1 {
			t.Fatalf("chunk %d: kept %q", size, tap.lines)
		}
		p := usage.Pending{SSE: tap.lines}
		usage.Extract(&p)
		if p.Event.InputTokens != 11 {
			t.Fatalf("chunk %d: usage %+v", size, p.Event)
		}
	}
	var clean sseTap
	clean.feed([]byte("event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"delta\":{\"text\":\"error\"}}\n\n"))
	if clean.errData != nil {
		t.Fatalf("a delta mentioning error was taken for an error event: %q", clean.errData)
	}
}
