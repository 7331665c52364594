package bench_test

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/impl/testing/cputime"
)

// The provider's answers, shaped like the simulator's for the benchmark's
// request: a small message, or the same reply as an event stream.
var (
	providerMessage = []byte(`{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[{"type":"text","text":"measure the added latency of the gateway please"}],"stop_reason":"end_turn","stop_sequence":null,"usage":{"input_tokens":8,"output_tokens":8}}`)
	providerEvents  = streamEvents()
)

func streamEvents() [][]byte {
	ev := func(typ, data string) []byte { return []byte("event: " + typ + "\ndata: " + data + "\n\n") }
	out := [][]byte{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[],"stop_reason":null,"usage":{"input_tokens":8,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type":"ping"}`),
	}
	for _, w := range strings.Fields("measure the added latency of the gateway please") {
		out = append(out, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+w+` "}}`))
	}
	return append(out,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}`),
		ev("message_stop", `{"type":"message_stop"}`),
	)
}

// eventReader hands out one event per Read, as a provider flushing each
// event does, so the proxy under test writes and flushes event by event.
type eventReader struct {
	events [][]byte
	i      int
}

func (r *eventReader) Read(p []byte) (int, error) {
	if r.i == len(r.events) {
		return 0, io.EOF
	}
	n := copy(p, r.events[r.i])
	r.i++
	return n, nil
}

func (r *eventReader) Close() error { return nil }

// memProvider is the trivial upstream: it answers in memory, so the
// benchmarks measure the proxies' own work and none of the network's.
type memProvider struct{}

var (
	jsonType = []string{"application/json"}
	sseType  = []string{"text/event-stream"}
)

func (memProvider) RoundTrip(r *http.Request) (*http.Response, error) {
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, err
	}
	res := &http.Response{StatusCode: http.StatusOK, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: make(http.Header, 2), Request: r}
	if r.Header.Get("X-Api-Key") != upstreamKey {
		res.StatusCode, res.Body = http.StatusUnauthorized, http.NoBody
		return res, nil
	}
	if bytes.Contains(body, []byte(`"stream":true`)) {
		res.Header["Content-Type"] = sseType
		res.ContentLength = -1
		res.Body = &eventReader{events: providerEvents}
		return res, nil
	}
	res.Header["Content-Type"] = jsonType
	res.Header["Content-Length"] = []string{strconv.Itoa(len(providerMessage))}
	res.ContentLength = int64(len(providerMessage))
	res.Body = io.NopCloser(bytes.NewReader(providerMessage))
	return res, nil
}

// discardWriter is a reusable ResponseWriter that counts what it is sent.
type discardWriter struct {
	h       http.Header
	code, n int
}

func (w *discardWriter) Header() http.Header { return w.h }
func (w *discardWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
}
func (w *discardWriter) Write(b []byte) (int, error) {
	w.WriteHeader(http.StatusOK)
	w.n += len(b)
	return len(b), nil
}
func (w *discardWriter) Flush() {}

// reusableBody lets one request be sent again without allocating.
type reusableBody struct{ bytes.Reader }

func (*reusableBody) Close() error { return nil }

// client is one simulated client connection: a request and a response
// writer reused for every iteration, so the harness allocates nothing.
type client struct {
	req     *http.Request
	body    reusableBody
	payload []byte
	w       discardWriter
	want    int
}

func newClient(stream bool, key string) *client {
	payload, want := []byte(bench.MessageBody), len(providerMessage)
	if stream {
		payload, want = []byte(bench.StreamBody), 0
		for _, e := range providerEvents {
			want += len(e)
		}
	}
	c := &client{payload: payload, want: want, w: discardWriter{h: http.Header{}}}
	c.req = httptest.NewRequest(http.MethodPost, "/v1/messages", nil)
	c.req.Header.Set("Content-Type", "application/json")
	c.req.Header.Set("Anthropic-Version", "2023-06-01")
	c.req.Header.Set("X-Api-Key", key)
	return c
}

func (c *client) do(h http.Handler) error {
	c.body.Reset(c.payload)
	c.req.Body, c.req.ContentLength = &c.body, int64(len(c.payload))
	clear(c.w.h)
	c.w.code, c.w.n = 0, 0
	h.ServeHTTP(&c.w, c.req)
	if c.w.code != http.StatusOK || c.w.n != c.want {
		return fmt.Errorf("status %d, %d of %d bytes", c.w.code, c.w.n, c.want)
	}
	return nil
}

// proxies are the two handlers compared: the gateway's relay.Handler on an
// in-memory snapshot, and the stock httputil.ReverseProxy baseline, both
// in front of the same in-memory provider.
func proxies(b *testing.B) []struct {
	name string
	h    http.Handler
	key  string
} {
	const upstream = "http://provider.invalid" // never dialled: the transport is in memory
	u, _ := url.Parse(upstream)
	return []struct {
		name string
		h    http.Handler
		key  string
	}{
		{"gateway", newGateway(b, upstream, memProvider{}), gatewayKey},
		{"bare", bench.NewBareProxy(u, upstreamKey, memProvider{}), "unused"},
	}
}

// BenchmarkProxyPath is the per-request cost of each proxy in-process: one
// client, one request at a time (the c=1 load series without the network).
func BenchmarkProxyPath(b *testing.B) {
	for _, p := range proxies(b) {
		for _, stream := range []bool{false, true} {
			kind := map[bool]string{false: "message", true: "stream"}[stream]
			b.Run(p.name+"/"+kind, func(b *testing.B) {
				c := newClient(stream, p.key)
				if err := c.do(p.h); err != nil {
					b.Fatal(err)
				}
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := cputime.Process()
				for b.Loop() {
					if err := c.do(p.h); err != nil {
						b.Fatal(err)
					}
				}
				reportCPU(b, cpu0)
			})
		}
	}
}

// BenchmarkProxyPathParallel runs non-streaming requests from GOMAXPROCS
// goroutines at once, showing contention on shared state (metrics, the
// usage queue, pools) that the sequential benchmark cannot.
func BenchmarkProxyPathParallel(b *testing.B) {
	for _, p := range proxies(b) {
		b.Run(p.name+"/message", func(b *testing.B) {
			b.ReportAllocs()
			cpu0 := cputime.Process()
			b.RunParallel(func(pb *testing.PB) {
				c := newClient(false, p.key)
				for pb.Next() {
					if err := c.do(p.h); err != nil {
						b.Error(err)
						return
					}
				}
			})
			reportCPU(b, cpu0)
		})
	}
}

// reportCPU reports the process's CPU time per request since cpu0, every
// goroutine included (the usage recorder's and the GC's too): on a shared
// machine wall time mostly measures the other tenants, and from parallel
// clients it hides work done on a core that would otherwise idle.
func reportCPU(b *testing.B, cpu0 time.Duration) {
	b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}

// TestProxyPathFixture checks the micro-benchmarks measure successful
// requests: both proxies answer the in-memory provider's full reply, and
// the gateway records usage for each.
func TestProxyPathFixture(t *testing.T) {
	t.Parallel()
	const upstream = "http://provider.invalid"
	u, _ := url.Parse(upstream)
	gw := newGateway(t, upstream, memProvider{})
	bare := bench.NewBareProxy(u, upstreamKey, memProvider{})
	for _, stream := range []bool{false, true} {
		for _, p := range []struct {
			h   http.Handler
			key string
		}{{gw, gatewayKey}, {bare, "unused"}} {
			c := newClient(stream, p.key)
			for range 3 {
				if err := c.do(p.h); err != nil {
					t.Fatalf("stream=%v: %v", stream, err)
				}
			}
		}
	}
	if n := gw.recorded(6); n != 6 {
		t.Errorf("gateway recorded %d events, want 6", n)
	}
	c := newClient(false, "sk-wrong")
	if err := c.do(gw); err == nil || c.w.code != http.StatusUnauthorized {
		t.Errorf("a wrong key got %d: the fixture must exercise authentication", c.w.code)
	}
}
