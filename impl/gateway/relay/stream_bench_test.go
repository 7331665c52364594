package relay

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/routing"
)

// benchEvents is a provider's answer of 14 events, as the bench
// simulator's are shaped.
func benchEvents() [][]byte {
	ev := func(typ, data string) []byte { return []byte("event: " + typ + "\ndata: " + data + "\n\n") }
	events := [][]byte{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"usage":{"input_tokens":8,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type":"ping"}`),
	}
	for _, w := range strings.Fields("measure the cost of the stream on every event please") {
		events = append(events, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+w+` "}}`))
	}
	return append(events,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}`),
		ev("message_stop", `{"type":"message_stop"}`))
}

// eventBody gives one event per Read, as a provider that flushes each
// event is read.
type eventBody struct{ events [][]byte }

func (b *eventBody) Read(p []byte) (int, error) {
	if len(b.events) == 0 {
		return 0, io.EOF
	}
	n := copy(p, b.events[0])
	if n == len(b.events[0]) {
		b.events = b.events[1:]
	} else {
		b.events[0] = b.events[0][n:]
	}
	return n, nil
}

func (*eventBody) Close() error { return nil }

// streamTransport answers every request with the event stream, in memory.
type streamTransport struct{ events [][]byte }

func (s streamTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	h := http.Header{}
	h.Set("Content-Type", "text/event-stream")
	return &http.Response{StatusCode: 200, Header: h, Body: &eventBody{append([][]byte(nil), s.events...)}, ContentLength: -1, Request: r}, nil
}

// firstFlush is a ResponseWriter that notes when a flush first carried a
// complete server-sent event to the client: the client's time to first
// chunk, less the network.
type firstFlush struct {
	*httptest.ResponseRecorder
	start, first time.Time
	flushes      int
}

// SetReadDeadline stands for net/http's: both paths bound their body
// read through it, as they do in production.
func (*firstFlush) SetReadDeadline(time.Time) error { return nil }

func (f *firstFlush) Flush() {
	f.flushes++
	if f.first.IsZero() && bytes.Contains(f.Body.Bytes(), []byte("\n\n")) {
		f.first = time.Now()
	}
	f.ResponseRecorder.Flush()
}

// benchStream sends b.N streaming requests through a handler whose
// upstream streams benchEvents, and reports the time from the request to
// the first flushed event (first-ns/op) beside the whole stream's cost.
func benchStream(b *testing.B, path string, hdr map[string]string, last string, events [][]byte) {
	s := fixture(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	h := New(Options{
		Source:    fakeSource{s},
		Transport: streamTransport{events},
		Recorder:  discardRecorder{},
		Board:     routing.NewBoard(nil),
		Affinity:  affinity.NewTable(),
		Admission: admission.New(admission.Options{}),
	})
	// The bench's body: the same bytes are a request in either dialect.
	reqBody := []byte(`{"model":"claude-test","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"measure the added latency of the gateway please"}]}`)
	var first time.Duration
	b.ReportAllocs()
	cpu0 := processCPU(b)
	for b.Loop() {
		req := httptest.NewRequest("POST", path, bytes.NewReader(reqBody))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		w := &firstFlush{ResponseRecorder: httptest.NewRecorder(), start: time.Now()}
		h.ServeHTTP(w, req)
		if w.Code != 200 || !strings.Contains(w.Body.String(), last) || w.first.IsZero() {
			b.Fatal(w.Code, w.Body.String())
		}
		first += w.first.Sub(w.start)
	}
	b.ReportMetric(float64(first.Nanoseconds())/float64(b.N), "first-ns/op")
	b.ReportMetric(float64((processCPU(b)-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// processCPU is the CPU time the process has used, garbage collection
// included: on a shared machine the wall-clock time of an op varies with
// the other load many times over, its CPU time far less.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkMessagesStream is a streaming Messages request through the
// relay: the baseline of BenchmarkChatCompletionsStream.
func BenchmarkMessagesStream(b *testing.B) {
	benchStream(b, "/v1/messages", map[string]string{"x-api-key": "sk-good", "anthropic-version": "2023-06-01"}, "event: message_stop", benchEvents())
}

// BenchmarkChatCompletionsStream is the same request and answer through
// /v1/chat/completions: the request translated, the stream translated
// event by event. The difference to BenchmarkMessagesStream is what the
// OpenAI dialect costs, in all and before the first chunk.
func BenchmarkChatCompletionsStream(b *testing.B) {
	benchStream(b, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"}, "data: [DONE]", benchEvents())
}

// shortEvents is the shortest whole answer: message_start, then
// message_stop. Its stream costs little more than its first chunk, so
// profiles of the two benchmarks below show what a path spends before
// the first chunk reaches the client.
func shortEvents() [][]byte {
	ev := benchEvents()
	return [][]byte{ev[0], ev[len(ev)-1]}
}

// BenchmarkMessagesFirstEvent is BenchmarkMessagesStream with the
// shortest answer.
func BenchmarkMessagesFirstEvent(b *testing.B) {
	benchStream(b, "/v1/messages", map[string]string{"x-api-key": "sk-good", "anthropic-version": "2023-06-01"}, "event: message_stop", shortEvents())
}

// BenchmarkChatCompletionsFirstChunk is BenchmarkChatCompletionsStream
// with the shortest answer.
func BenchmarkChatCompletionsFirstChunk(b *testing.B) {
	benchStream(b, "/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"}, "data: [DONE]", shortEvents())
}
