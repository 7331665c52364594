package relay

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/gateway/usage"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
	"github.com/pillarhq/pillar/impl/testing/wat"
)

// cannedTransport answers every request in memory, so the benchmark
// measures the relay's own work, not the network.
type cannedTransport struct{ body []byte }

func (c cannedTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(c.body)), ContentLength: int64(len(c.body)), Request: r}, nil
}

type discardRecorder struct{}

func (discardRecorder) Record(p usage.Pending) {
	if p.Release != nil {
		p.Release()
	}
}

func benchHandler(b *testing.B) *Handler {
	s := fixture(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	return New(Options{
		Source:    fakeSource{s},
		Transport: cannedTransport{[]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)},
		Recorder:  discardRecorder{},
		// As the server wires it: every request reads the cooldowns and
		// counts itself in flight, the session table and the principals'
		// caps are there (this principal has none).
		Board:     routing.NewBoard(nil),
		Affinity:  affinity.NewTable(),
		Admission: admission.New(admission.Options{}),
	})
}

// BenchmarkRelaySession is BenchmarkRelay for a request of a Claude Code
// session: its key, its rendezvous order and its landing recorded.
func BenchmarkRelaySession(b *testing.B) {
	benchRequests(b, benchHandler(b), "X-Claude-Code-Session-Id", "5d9b4a3e-8f7c-4f0e-9a55-2b1d6c0e7f11")
}

// BenchmarkRelayCapped is BenchmarkRelay for a principal with a
// max_in_flight it never reaches: a slot taken and given back.
func BenchmarkRelayCapped(b *testing.B) {
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	cfg.Principals[0].MaxInFlight = 1000
	benchRequests(b, New(Options{
		Source:    fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))},
		Transport: cannedTransport{[]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)},
		Recorder:  discardRecorder{},
		Board:     routing.NewBoard(nil),
		Admission: admission.New(admission.Options{}),
	}))
}

// BenchmarkRelay is the per-request cost of the proxy path: key lookup,
// body scan, routing, header copy, credential swap, relay and usage capture.
func BenchmarkRelay(b *testing.B) {
	benchRequests(b, benchHandler(b))
}

// BenchmarkRelayLimitedWithMetrics adds what limits and metrics put on the
// path: a principal with limits (admission, standing,
// anthropic-ratelimit-* headers) and the metrics (time to first byte).
// Compare with BenchmarkRelay for the cost of both.
func BenchmarkRelayLimitedWithMetrics(b *testing.B) {
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	cfg.Principals[0].DefaultLimits = []byte(`[{"kind":"requests","window_secs":60,"max":1000000000},{"kind":"tokens","window_secs":3600,"max":1000000000}]`)
	benchRequests(b, New(Options{
		Source:    fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))},
		Transport: cannedTransport{[]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)},
		Recorder:  discardRecorder{},
		Limiter:   limits.New(limits.Options{}),
		Metrics:   NewMetrics(prometheus.NewRegistry()),
	}))
}

// benchRequests sends b.N small Messages requests through h.
func benchRequests(b *testing.B, h http.Handler, hdr ...string) {
	reqBody := []byte(`{"model":"claude-test","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		req := httptest.NewRequest("POST", "/v1/messages", bytes.NewReader(reqBody))
		req.Header.Set("x-api-key", "sk-good")
		req.Header.Set("anthropic-version", "2023-06-01")
		for j := 0; j+1 < len(hdr); j += 2 {
			req.Header.Set(hdr[j], hdr[j+1])
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != 200 {
			b.Fatal(w.Code, w.Body.String())
		}
	}
}

// BenchmarkScanRequest1MB: finding model/stream in a large prompt.
func BenchmarkScanRequest1MB(b *testing.B) {
	msg := strings.Repeat(`{"role":"user","content":"`+strings.Repeat("lorem ipsum ", 80)+`"},`, 1000)
	body := []byte(`{"max_tokens":16,"messages":[` + strings.TrimSuffix(msg, ",") + `],"model":"claude-test","stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if m, s, err := scanRequest(body); err != nil || m != "claude-test" || !s {
			b.Fatal(m, s, err)
		}
	}
}

// BenchmarkScanRequestTypical: model/stream of an ordinary body, the
// top-level keys an SDK sends with a short conversation.
func BenchmarkScanRequestTypical(b *testing.B) {
	body := []byte(`{"model":"claude-test","max_tokens":1024,"temperature":0.7,` +
		`"system":[{"type":"text","text":"You are a helpful assistant.","cache_control":{"type":"ephemeral"}}],` +
		`"tools":[{"name":"get_weather","description":"Weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}}],` +
		`"messages":[{"role":"user","content":"` + strings.Repeat("hello there ", 100) + `"},{"role":"assistant","content":"hi"},{"role":"user","content":"and?"}],` +
		`"metadata":{"user_id":"u-123"},"stop_sequences":["\n\nHuman:"],"stream":true}`)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if m, s, err := scanRequest(body); err != nil || m != "claude-test" || !s {
			b.Fatal(m, s, err)
		}
	}
}

// BenchmarkRelayRouterPlugin is BenchmarkRelay with a one-plugin chain: the
// sample pin router (a Go module, run by wazero) decides every request.
func BenchmarkRelayRouterPlugin(b *testing.B) {
	dir := b.TempDir()
	wasmPath := filepath.Join(dir, "pinrouter.wasm")
	cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", wasmPath, "./fixtures/plugins/pinrouter")
	cmd.Dir = filepath.Join("..", "..", "..")
	cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		b.Fatalf("build plugin: %v\n%s", err, out)
	}
	wasm, _ := os.ReadFile(wasmPath)
	benchRelayRouterPlugin(b, wasm)
}

// BenchmarkRelayRouterPluginWAT is the same with the pin router written in
// WebAssembly text, which runs metered (no guest runtime, no watcher
// goroutine per call).
func BenchmarkRelayRouterPluginWAT(b *testing.B) {
	wasm, err := wat.File(filepath.Join("..", "..", "..", "fixtures", "plugins", "pinrouterwat", "pinrouterwat.wat"))
	if err != nil {
		b.Fatal(err)
	}
	benchRelayRouterPlugin(b, wasm)
}

func benchRelayRouterPlugin(b *testing.B, wasm []byte) {
	// A loaded machine must not turn a slow call into a failed run.
	rt, err := plugins.New(context.Background(), plugins.Options{CallTimeout: 5 * time.Second})
	if err != nil {
		b.Fatal(err)
	}
	defer rt.Close(context.Background())
	digest, _, err := rt.Compile(context.Background(), wasm)
	if err != nil {
		b.Fatal(err)
	}
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	reg := "wasm_pin"
	cfg.Plugins = []store.RegistryEntry{{ID: reg, Name: "pinrouter", Digest: digest, Slots: []string{"router"}}}
	cfg.Chains = append(cfg.Chains, store.ChainEntry{ID: "ce_2", PrincipalID: "pr_a", Slot: "router", WasmRegistryID: &reg,
		Config: []byte(`{"upstream_id":"up_1"}`), Position: 1, Enabled: true})
	h := New(Options{
		Source:    fakeSource{snapshot.Build(cfg, plainOpener{}, time.Now())},
		Transport: cannedTransport{[]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)},
		Recorder:  discardRecorder{},
		Plugins:   rt,
	})
	benchRequests(b, h)
}

// BenchmarkSSETap is the tap's work on one stream of 14 events, fed one
// event per read as the proxy path reads a provider that flushes each.
func BenchmarkSSETap(b *testing.B) {
	ev := func(typ, data string) []byte { return []byte("event: " + typ + "\ndata: " + data + "\n\n") }
	events := [][]byte{
		ev("message_start", `{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","model":"claude-test","content":[],"stop_reason":null,"usage":{"input_tokens":8,"output_tokens":1}}}`),
		ev("content_block_start", `{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`),
		ev("ping", `{"type":"ping"}`),
	}
	for _, w := range strings.Fields("measure the cost of the tap on every event please") {
		events = append(events, ev("content_block_delta", `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`+w+` "}}`))
	}
	events = append(events,
		ev("content_block_stop", `{"type":"content_block_stop","index":0}`),
		ev("message_delta", `{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}`),
		ev("message_stop", `{"type":"message_stop"}`))
	b.ReportAllocs()
	for b.Loop() {
		var tap sseTap
		for _, e := range events {
			tap.feed(e)
		}
		if len(tap.lines) != 3 || !tap.started {
			b.Fatalf("kept %d lines", len(tap.lines))
		}
	}
}

// BenchmarkRelayTraced is BenchmarkRelay with tracing on, sampling 1 % and
// 100 % of requests, exported over OTLP/gRPC to a receiver on loopback (in
// this process: its decoding is in the process's CPU, not in ns/op).
// Compare with BenchmarkRelay, tracing off.
func BenchmarkRelayTraced(b *testing.B) {
	for _, ratio := range []float64{0.01, 1} {
		b.Run(fmt.Sprintf("sampled-%g%%", ratio*100), func(b *testing.B) {
			c := otlptest.NewCounter()
			p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, Protocol: tracing.GRPC, Endpoint: otlptest.StartGRPC(b, c),
				SamplerRatio: ratio, PropagateTraceparent: true}, tracing.Options{ServiceName: "bench"})
			if err != nil {
				b.Fatal(err)
			}
			defer p.Shutdown(context.Background())
			s := fixture(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
			benchRequests(b, New(Options{
				Source:    fakeSource{s},
				Transport: cannedTransport{[]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)},
				Recorder:  discardRecorder{},
				Board:     routing.NewBoard(nil),
				Tracer:    p.Tracer(), Propagate: p.Propagate(),
			}))
		})
	}
}
