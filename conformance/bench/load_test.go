package bench_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/sim/provider"
)

// newFakeClock is the load generator's clock in tests: it moves only when a
// test server says so, and announces every reading so a server can wait
// until the client has taken its measurement.
func newFakeClock() *fakeclock.Clock { return fakeclock.New(time.Unix(1_000_000, 0)) }

// awaitRead blocks until the client reads the clock; the bound only turns a
// broken measurement into a failure instead of a hung test.
func awaitRead(t *testing.T, c *fakeclock.Clock) {
	select {
	case <-c.Reads():
	case <-time.After(10 * time.Second):
		t.Error("the client never read the clock")
	}
}

func event(typ string) string {
	return fmt.Sprintf("event: %s\ndata: {\"type\":%q}\n\n", typ, typ)
}

const messageJSON = `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":3,"output_tokens":1}}`

func TestOnceMeasuresToLastByteAndToFirstEvent(t *testing.T) {
	t.Parallel()
	for _, stream := range []bool{false, true} {
		clock := newFakeClock()
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			awaitRead(t, clock) // the client's start reading
			clock.Advance(2 * time.Millisecond)
			if !stream {
				io.WriteString(w, messageJSON)
				return
			}
			w.Header().Set("Content-Type", "text/event-stream")
			io.WriteString(w, event("message_start"))
			w.(http.Flusher).Flush()
			awaitRead(t, clock) // the client has the first event and reads the clock now
			clock.Advance(5 * time.Millisecond)
			io.WriteString(w, event("content_block_delta")+event("message_stop"))
		}))
		c := bench.NewClient(clock.Now)
		// For a stream, the 5ms the rest of it took are not counted.
		d, err := c.Once(context.Background(), bench.Target{Name: "t", BaseURL: srv.URL, Key: "k"}, stream)
		if err != nil || d != 2*time.Millisecond {
			t.Errorf("stream=%v: latency %v, %v; want 2ms", stream, d, err)
		}
		c.Close()
		srv.Close()
	}
}

func TestOnceSendsAnAnthropicRequest(t *testing.T) {
	t.Parallel()
	var got http.Header
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != "/v1/messages" {
			t.Errorf("request %s %s", r.Method, r.URL.Path)
		}
		got = r.Header.Clone()
		json.NewDecoder(r.Body).Decode(&body)
		io.WriteString(w, messageJSON)
	}))
	defer srv.Close()
	c := bench.NewClient(nil)
	defer c.Close()
	if _, err := c.Once(context.Background(), bench.Target{Name: "t", BaseURL: srv.URL, Key: "sk-x"}, false); err != nil {
		t.Fatal(err)
	}
	if got.Get("X-Api-Key") != "sk-x" || got.Get("Anthropic-Version") == "" || got.Get("Content-Type") != "application/json" {
		t.Errorf("headers %v", got)
	}
	if body["model"] == nil || body["max_tokens"] == nil || body["messages"] == nil {
		t.Errorf("body %v", body)
	}
}

func TestOnceReportsBrokenAnswers(t *testing.T) {
	t.Parallel()
	cases := map[string]struct {
		stream bool
		answer func(w http.ResponseWriter)
		want   string
	}{
		"error status": {false, func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusUnauthorized)
			io.WriteString(w, `{"type":"error","error":{"type":"authentication_error"}}`)
		}, "status 401: {\"type\":\"error\""},
		"not a message":     {false, func(w http.ResponseWriter) { io.WriteString(w, `{}`) }, "not a message"},
		"stream, no events": {true, func(w http.ResponseWriter) { io.WriteString(w, "\n\n") }, "before its first event"},
		"stream cut short":  {true, func(w http.ResponseWriter) { io.WriteString(w, event("message_start")) }, "without message_stop"},
		// A data line that fills the reader's 4 KB buffer exactly leaves a bare
		// newline as its last piece; that is not the blank line ending an event.
		"stream, one long unfinished event": {true, func(w http.ResponseWriter) {
			io.WriteString(w, "event: message_start\ndata: "+strings.Repeat("x", 4096-len("data: "))+"\n")
		}, "before its first event"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tc.answer(w) }))
			defer srv.Close()
			c := bench.NewClient(nil)
			defer c.Close()
			_, err := c.Once(context.Background(), bench.Target{Name: "t", BaseURL: srv.URL, Key: "k"}, tc.stream)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tc.want)
			}
		})
	}
}

func TestSeriesAlternatesTheOrderOfTargets(t *testing.T) {
	t.Parallel()
	targets, order := orderedTargets(t, "A", "B", "C")
	c := bench.NewClient(nil)
	defer c.Close()
	got, err := c.Series(context.Background(), targets, false, 5, 2)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range got {
		if len(s) != 5 {
			t.Errorf("target %d: %d samples, want 5", i, len(s))
		}
	}
	want := "AABBCC" + "CCBBAA" + "ABC"
	if s := strings.Join(order(), ""); s != want {
		t.Errorf("order %s, want %s", s, want)
	}
}

func TestThroughputSendsExactlyTheRequestCount(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		mu.Unlock()
		clock.Advance(time.Millisecond) // every request costs 1ms of the run
		io.WriteString(w, messageJSON)
	}))
	defer srv.Close()
	c := bench.NewClient(clock.Now)
	defer c.Close()
	rps, err := c.Throughput(context.Background(), bench.Target{Name: "t", BaseURL: srv.URL, Key: "k"}, 4, 50)
	if err != nil {
		t.Fatal(err)
	}
	if served != 50 {
		t.Errorf("served %d, want 50", served)
	}
	if rps != 1000 {
		t.Errorf("rate %v req/s, want 1000 (50 requests in 50ms)", rps)
	}
}

func TestThroughputStopsAtTheFirstFailure(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	served := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		served++
		n := served
		mu.Unlock()
		if n > 10 {
			w.WriteHeader(http.StatusInternalServerError)
			return
		}
		io.WriteString(w, messageJSON)
	}))
	defer srv.Close()
	c := bench.NewClient(nil)
	defer c.Close()
	_, err := c.Throughput(context.Background(), bench.Target{Name: "t", BaseURL: srv.URL, Key: "k"}, 4, 1000)
	if err == nil || !strings.Contains(err.Error(), "status 500") {
		t.Fatalf("err = %v, want the 500", err)
	}
	if served > 14 {
		t.Errorf("%d requests after the failure; the run should stop (at most one in flight per client)", served-10)
	}
}

// TestRunAgainstTheSimulator runs the whole measurement in-process with
// small counts: the real sim, the real relay, the baseline and a control,
// proving every path answers correctly and the baselines swap in the
// upstream key.
func TestRunAgainstTheSimulator(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	seen := map[string]int{} // x-api-key the provider received -> requests
	_, gw, targets := inProcessPaths(t, func(sim http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen[r.Header.Get("X-Api-Key")]++
			mu.Unlock()
			sim.ServeHTTP(w, r)
		})
	})
	p := bench.Params{Warmup: 3, Latency: 20, Stream: 20, Block: 7, Clients: 4, ThroughputN: 30, ThroughputRun: 2}
	c := bench.NewClient(nil)
	defer c.Close()
	rep, err := bench.Run(context.Background(), c, targets, p, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 5 {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Rows {
		if len(r.Values) != 3 {
			t.Fatalf("%s: values %v, want gateway, bare and control", r.Metric, r.Values)
		}
		for i, v := range r.Values {
			if !(v > 0) {
				t.Errorf("%s: %s = %v", r.Metric, targets[i].Name, v)
			}
		}
	}

	perTarget := 2*p.Warmup + 20*p.Clients + p.Latency + p.Stream + p.ThroughputRun*p.ThroughputN
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[upstreamKey] != 3*perTarget {
		t.Errorf("provider saw keys %v, want %d requests all with the upstream key", seen, 3*perTarget)
	}
	// The gateway did its usage work for every one of its requests.
	if n := gw.recorded(perTarget); n != perTarget {
		t.Errorf("gateway recorded %d request events, want %d", n, perTarget)
	}
}

func TestInterleavedSendsOneRequestPerTargetInTurn(t *testing.T) {
	t.Parallel()
	targets, order := orderedTargets(t, "D", "A", "B")
	c := bench.NewClient(nil)
	defer c.Close()
	got, err := c.Interleaved(context.Background(), targets, false, 4)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range got {
		if len(s) != 4 {
			t.Fatalf("target %d: %d samples, want 4", i, len(s))
		}
		for r, x := range s {
			if x.D <= 0 || x.Start.IsZero() {
				t.Errorf("target %d round %d: sample %+v", i, r, x)
			}
		}
	}
	// One request per target per round, each round starting one target later.
	want := "DAB" + "ABD" + "BDA" + "DAB"
	if s := strings.Join(order(), ""); s != want {
		t.Errorf("order %s, want %s", s, want)
	}
}

func TestAddedIsPathMinusDirectRoundByRound(t *testing.T) {
	t.Parallel()
	us := func(v ...int) []bench.Sample {
		out := make([]bench.Sample, len(v))
		for i, x := range v {
			out[i].D = time.Duration(x) * time.Microsecond
		}
		return out
	}
	direct, path := us(100, 300, 200), us(150, 320, 900)
	got := bench.Added(path, direct)
	want := []time.Duration{50 * time.Microsecond, 20 * time.Microsecond, 700 * time.Microsecond}
	if !slices.Equal(got, want) {
		t.Errorf("added %v, want %v", got, want)
	}
	if s := bench.Slowest([][]bench.Sample{direct, path}, 1, 0.34); !slices.Equal(s, []int{2}) {
		t.Errorf("slowest %v, want round 2", s)
	}
}

// TestRunInterleavedAgainstTheSimulator measures the interleaved section
// in-process: the provider directly, the relay and the baseline, every
// request a complete answer, and a row per added-latency figure.
func TestRunInterleavedAgainstTheSimulator(t *testing.T) {
	t.Parallel()
	direct, gw, targets := inProcessPaths(t, nil)
	c := bench.NewClient(nil)
	defer c.Close()
	rep, err := bench.RunInterleaved(context.Background(), c, direct, targets[:2], 10, 2, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 4 || len(rep.Messages) != 3 || len(rep.Streams) != 3 || len(rep.Messages[1]) != 10 {
		t.Fatalf("report %+v", rep)
	}
	if n := gw.recorded(2 * (10 + 2)); n != 2*(10+2) {
		t.Errorf("gateway recorded %d request events, want %d", n, 2*(10+2))
	}
	md := rep.Markdown()
	if len(rep.Spread) != 2 || len(rep.Spread[0].Gateway) != bench.SpreadBlocks || len(rep.Spread[1].Gateway) != bench.SpreadBlocks {
		t.Errorf("block spread %+v", rep.Spread)
	}
	for _, s := range []string{"added latency p99", "added time to first event p99", "≤ 1.1x", "over 5 consecutive blocks of 2 rounds"} {
		if !strings.Contains(md, s) {
			t.Errorf("section lacks %q:\n%s", s, md)
		}
	}
}

// orderedTargets starts one provider per name, each answering a message;
// order reports the names of the providers in the order they were asked.
func orderedTargets(t *testing.T, names ...string) (targets []bench.Target, order func() []string) {
	var mu sync.Mutex
	var seen []string
	for _, name := range names {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			mu.Lock()
			seen = append(seen, name)
			mu.Unlock()
			io.WriteString(w, messageJSON)
		}))
		t.Cleanup(srv.Close)
		targets = append(targets, bench.Target{Name: name, BaseURL: srv.URL, Key: "k"})
	}
	return targets, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), seen...)
	}
}

// TestRunDialectsAgainstTheSimulator measures the OpenAI-dialect section
// in-process: the provider directly, the relay's /v1/chat/completions and
// its /v1/messages twice, every stream complete (a chunk stream ends with
// [DONE]), the OpenAI path's requests recorded in the OpenAI dialect, the
// provider given the same bytes on every path (the translation's, with its
// cache breakpoint), and the table with its noise floor.
func TestRunDialectsAgainstTheSimulator(t *testing.T) {
	t.Parallel()
	sim := provider.New(provider.Options{APIKeys: []string{upstreamKey}})
	simSrv := httptest.NewServer(sim)
	defer simSrv.Close()
	gw := newGateway(t, simSrv.URL, nil)
	gwSrv := httptest.NewServer(gw)
	defer gwSrv.Close()
	c := bench.NewClient(nil)
	defer c.Close()
	direct := bench.Target{Name: "direct", BaseURL: simSrv.URL, Key: upstreamKey}
	openai := bench.Target{Name: "openai", BaseURL: gwSrv.URL, Key: gatewayKey, OpenAI: true}
	messages := bench.Target{Name: "messages", BaseURL: gwSrv.URL, Key: gatewayKey}
	control := bench.Target{Name: "messages′", BaseURL: gwSrv.URL, Key: gatewayKey}
	rep, err := bench.RunDialects(context.Background(), c, direct, openai, messages, control, 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 || len(rep.Streams) != 4 || len(rep.Streams[1]) != 10 || len(rep.Spread) != 1 || len(rep.Spread[0].Gateway) != bench.SpreadBlocks {
		t.Fatalf("report %+v", rep)
	}
	for _, r := range rep.Rows {
		if len(r.Values) != 3 || r.Values[bench.Gateway] <= 0 || r.Values[bench.Bare] <= 0 || r.Values[bench.Control] <= 0 {
			t.Fatalf("row %+v", r)
		}
	}
	const perPath = 10 + 2
	if n := gw.recorded(3 * perPath); n != 3*perPath {
		t.Fatalf("gateway recorded %d request events, want %d", n, 3*perPath)
	}
	gw.events.mu.Lock()
	d := maps.Clone(gw.events.dialects)
	gw.events.mu.Unlock()
	if d[store.DialectOpenAI] != perPath || d[store.DialectMessages] != 2*perPath {
		t.Fatalf("events by dialect %v, want %d openai and %d messages", d, perPath, 2*perPath)
	}
	want, err := bench.UpstreamStreamBody()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(want, `"cache_control"`) {
		t.Fatalf("the translation of the stream body has no cache breakpoint: %s", want)
	}
	bodies := map[string]int{}
	for _, r := range sim.Requests() {
		bodies[r.Body]++
	}
	if len(bodies) != 1 || bodies[want] != 4*perPath {
		t.Fatalf("the provider got %d distinct bodies %v, want %d of %s", len(bodies), bodies, 4*perPath, want)
	}
	md := rep.Markdown()
	for _, s := range []string{"| metric (path − direct) | openai | messages | openai ÷ messages | target | noise floor: messages′ ÷ messages |",
		"added time to first chunk p99", "over 5 consecutive blocks of 2 rounds"} {
		if !strings.Contains(md, s) {
			t.Errorf("section lacks %q:\n%s", s, md)
		}
	}
	// A Messages target in the OpenAI slot is refused, not measured.
	if _, err := bench.RunDialects(context.Background(), c, direct, messages, messages, control, 1, 0); err == nil {
		t.Fatal("RunDialects accepted a Messages path as the OpenAI one")
	}
}

// The verdict: within noise when openai ÷ messages is no larger than the
// farther of the control's ratio and its inverse.
func TestWithinNoise(t *testing.T) {
	for _, c := range []struct {
		values []float64
		want   bool
	}{
		{[]float64{100, 100, 100}, true},
		{[]float64{104, 100, 95}, true},   // control 0.95: 1/0.95 ≈ 1.053 allows 1.04
		{[]float64{106, 100, 95}, false},  // 1.06 > 1.053
		{[]float64{90, 100, 101}, true},   // faster is within
		{[]float64{102, 100, 101}, false}, // 1.02 > 1.01
		{[]float64{100, 100}, false},      // no control, no verdict
	} {
		if got := bench.WithinNoise(bench.Row{Values: c.values}); got != c.want {
			t.Errorf("WithinNoise(%v) = %v, want %v", c.values, got, c.want)
		}
	}
}

// TestBedrockComparisonMeasuresBothKinds runs the Bedrock section's shape
// on four paths to one in-process simulator: a latency and a time to first
// event pair of rows, every path's samples of both kinds, a block spread
// per p99 row, and the table naming bedrock against anthropic with the
// second anthropic path as the noise floor.
func TestBedrockComparisonMeasuresBothKinds(t *testing.T) {
	t.Parallel()
	simSrv := httptest.NewServer(provider.New(provider.Options{APIKeys: []string{upstreamKey}}))
	defer simSrv.Close()
	c := bench.NewClient(nil)
	defer c.Close()
	at := func(name string) bench.Target { return bench.Target{Name: name, BaseURL: simSrv.URL, Key: upstreamKey} }
	rep, err := bench.Bedrock.Run(context.Background(), c, at("direct"), at("bedrock"), at("anthropic"), at("anthropic′"), 10, 2)
	if err != nil {
		t.Fatal(err)
	}
	var metrics []string
	for _, r := range rep.Rows {
		metrics = append(metrics, r.Metric)
		if len(r.Values) != 3 {
			t.Errorf("row %+v: want the path, the reference and its copy", r)
		}
	}
	if got := strings.Join(metrics, ", "); got != "added latency p50, added latency p99, added time to first event p50, added time to first event p99" {
		t.Fatalf("rows %s", got)
	}
	if len(rep.Messages) != 4 || len(rep.Streams) != 4 || len(rep.Messages[1]) != 10 || len(rep.Streams[3]) != 10 {
		t.Fatalf("samples: %d and %d paths", len(rep.Messages), len(rep.Streams))
	}
	if len(rep.Spread) != 2 || len(rep.Spread[1].Gateway) != bench.SpreadBlocks || len(rep.Spread[1].Control) != bench.SpreadBlocks {
		t.Fatalf("block spread %+v", rep.Spread)
	}
	md := rep.Markdown()
	for _, s := range []string{"## Bedrock upstream against an Anthropic upstream",
		"| metric (path − direct) | bedrock | anthropic | bedrock ÷ anthropic | target | noise floor: anthropic′ ÷ anthropic |",
		"added time to first event p99 over 5 consecutive blocks of 2 rounds: bedrock ÷ anthropic", "\n10 rounds of each kind"} {
		if !strings.Contains(md, s) {
			t.Errorf("section lacks %q:\n%s", s, md)
		}
	}
}

// inProcessPaths serves the simulator (through wrap, when set), the
// gateway and two bare proxies on loopback, closed with the test: the
// direct target and the Gateway, Bare and Control ones.
func inProcessPaths(t *testing.T, wrap func(http.Handler) http.Handler) (bench.Target, gateway, []bench.Target) {
	var sim http.Handler = provider.New(provider.Options{APIKeys: []string{upstreamKey}, MaxRecorded: -1})
	if wrap != nil {
		sim = wrap(sim)
	}
	simSrv := httptest.NewServer(sim)
	t.Cleanup(simSrv.Close)
	simURL, _ := url.Parse(simSrv.URL)
	gw := newGateway(t, simSrv.URL, nil)
	serve := func(h http.Handler) string {
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		return srv.URL
	}
	// The baselines ignore the client's key; a dummy of the same length
	// keeps the requests the same size on every path.
	dummy := strings.Repeat("x", len(gatewayKey))
	return bench.Target{Name: "direct", BaseURL: simSrv.URL, Key: upstreamKey}, gw, []bench.Target{
		{Name: "gateway", BaseURL: serve(gw), Key: gatewayKey},
		{Name: "bare", BaseURL: serve(bench.NewBareProxy(simURL, upstreamKey, nil)), Key: dummy},
		{Name: "control", BaseURL: serve(bench.NewBareProxy(simURL, upstreamKey, nil)), Key: dummy},
	}
}
