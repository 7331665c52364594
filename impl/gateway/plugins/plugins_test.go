package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tetratelabs/wazero"

	"github.com/pillarhq/pillar/impl/testing/cputime"
	"github.com/pillarhq/pillar/impl/testing/promtest"
	"github.com/pillarhq/pillar/impl/testing/wat"
)

// modules are the sample plugins of fixtures/plugins, built once, and
// compiled once into cache.
var (
	modules = map[string][]byte{}
	cache   = wazero.NewCompilationCache()
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plugins")
	if err != nil {
		panic(err)
	}
	// The repository, from the package's directory (go test's working
	// directory; -trimpath leaves no source path to start from).
	root := filepath.Join("..", "..", "..")
	for _, name := range []string{"modelrouter", "pinrouter", "hostile", "dialect", "v1router"} {
		out := filepath.Join(dir, name+".wasm")
		cmd := exec.Command("go", "build", "-buildmode=c-shared", "-o", out, "./fixtures/plugins/"+name)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "GOOS=wasip1", "GOARCH=wasm", "CGO_ENABLED=0")
		if b, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", name, err, b)
			os.Exit(2)
		}
		modules[name], _ = os.ReadFile(out)
	}
	// Plugins written in WebAssembly text (wat2wasm, Debian's wabt).
	for _, name := range []string{"pinrouterwat"} {
		if modules[name], err = wat.File(filepath.Join(root, "fixtures", "plugins", name, name+".wat")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newRuntime(t testing.TB, o Options) (*Runtime, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
	o.CompilationCache = cache
	r, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r, reg
}

func compile(t testing.TB, r *Runtime, name string) string {
	t.Helper()
	d, _, err := r.Compile(context.Background(), modules[name])
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// table is the upstream table every binding of these tests gets; tests
// offer candidates by index.
var table = []Candidate{{ID: "up_a", Kind: "vendor_oauth", Healthy: true}, {ID: "up_b", Kind: "vendor_api_key", Healthy: true},
	{ID: "up_c", Kind: "vendor_api_key", Healthy: true}}

func bind(t testing.TB, r *Runtime, digest, config string) *Binding {
	t.Helper()
	b, err := r.BindRouter(digest, []byte(config), table)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Release)
	return b
}

// ids names the chosen table indexes.
func ids(idx []uint16) string {
	var s []string
	for _, i := range idx {
		s = append(s, table[i].ID)
	}
	return strings.Join(s, ",")
}

var all = []uint16{0, 1, 2}

func TestCompileReadsSlots(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	for name, want := range map[string]string{"modelrouter": "router", "pinrouter": "router", "hostile": "router",
		"dialect": "warmup_dialect", "v1router": "router"} {
		d, slots, err := r.Compile(context.Background(), modules[name])
		if err != nil || strings.Join(slots, ",") != want || d != Digest(modules[name]) || !r.Loaded(d) {
			t.Errorf("%s: %v %v", name, slots, err)
		}
	}
	for name, wasm := range map[string][]byte{"empty": nil, "text": []byte("not wasm"),
		// A valid module with no exports.
		"no exports": {0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00}} {
		if _, _, err := r.Compile(context.Background(), wasm); !errors.Is(err, ErrInvalidModule) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// Routing decided by a plugin's config, which reaches the instance once;
// refusals.
func TestRoute(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	ctx := context.Background()
	d := compile(t, r, "modelrouter")
	b := bind(t, r, d, `{"routes":{"claude-haiku":["up_b","up_a"],"claude":["up_c"]}}`)
	for model, want := range map[string]string{"claude-haiku-4-5": "up_b,up_a", "claude-opus-4": "up_c", "gpt-x": "up_a,up_b,up_c"} {
		out, ref, err := b.Route(ctx, &RouteRequest{Model: model}, all, nil)
		if err != nil || ref != nil || ids(out) != want {
			t.Errorf("%s: %v %+v %v, want %s", model, ids(out), ref, err, want)
		}
	}
	// Only offered candidates can be chosen.
	out, _, err := b.Route(ctx, &RouteRequest{Model: "claude-haiku-4-5"}, []uint16{0, 2}, nil)
	if err != nil || ids(out) != "up_a" {
		t.Errorf("narrowed: %v %v", ids(out), err)
	}
	refusing := bind(t, r, d, `{"routes":{"claude-haiku":["up_b"]},"default":"refuse"}`)
	out, ref, err := refusing.Route(ctx, &RouteRequest{Model: "claude-opus-4"}, all, nil)
	if err != nil || out != nil || ref == nil || ref.Status != 403 || ref.Type != "permission_error" || !strings.Contains(ref.Message, "claude-opus-4") {
		t.Fatalf("refusal: %v %+v %v", out, ref, err)
	}
	if _, err := r.BindRouter("0000", nil, table); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("unknown digest: %v", err)
	}
	if _, err := r.BindRouter(compile(t, r, "dialect"), nil, table); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("dialect as a router: %v", err)
	}
	if _, err := r.Call(ctx, d, "warmup_dialect", []byte("{}")); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("missing slot: %v", err)
	}
	if _, _, err := b.Route(ctx, &RouteRequest{}, []uint16{7}, nil); err == nil {
		t.Fatal("a candidate outside the table was sent")
	}
}

// The two sample pin routers, in Go and in WebAssembly text, route alike:
// the text one runs metered, the Go one under the termination checks.
func TestPinRouters(t *testing.T) {
	// Routing is under test here, not time limits: a loaded machine must
	// not fail the Go module's configuration.
	r, _ := newRuntime(t, Options{CallTimeout: 10 * time.Second})
	ctx := context.Background()
	// A larger table than the other tests' and candidates in any order, as
	// a router earlier in the chain leaves them.
	big := make([]Candidate, 300)
	for i := range big {
		big[i] = Candidate{ID: fmt.Sprintf("up_%d", i), Kind: "vendor_api_key", Healthy: true}
	}
	rev := make([]uint16, 300)
	for i := range rev {
		rev[i] = uint16(299 - i)
	}
	name := func(idx []uint16) string {
		var s []string
		for _, i := range idx {
			s = append(s, big[i].ID)
		}
		return strings.Join(s, ",")
	}
	for _, module := range []string{"pinrouter", "pinrouterwat"} {
		d := compile(t, r, module)
		if got, want := r.Metered(d), module == "pinrouterwat"; got != want {
			t.Errorf("%s metered: %v, want %v", module, got, want)
		}
		for _, c := range []struct {
			config string
			cands  []uint16
			want   string
		}{
			{`{"upstream_id":"up_1","fallback":true}`, []uint16{0, 1, 2}, "up_1,up_0,up_2"},
			{`{"upstream_id":"up_1"}`, []uint16{0, 1, 2}, "up_1"},
			{`{"upstream_id":"up_1","fallback":false}`, []uint16{2, 1}, "up_1"},
			{`{"upstream_id":"up_1","fallback":true}`, []uint16{0, 2}, "up_0,up_2"},           // not offered: unchanged
			{`{"upstream_id":"up_1"}`, []uint16{0, 2}, "up_0,up_2"},                           // … even without fallback
			{`{"upstream_id":"up_zzz","fallback":true}`, []uint16{2, 0, 1}, "up_2,up_0,up_1"}, // unknown upstream
			{`{}`, []uint16{1, 0}, "up_1,up_0"},
			{`{"upstream_id":null,"other":{"upstream_id":"up_2"},"fallback":null}`, []uint16{0, 2}, "up_0,up_2"},
			{`{"note":"a \"quoted\" [odd] {value}","upstream_id":"up_299","fallback":true}`, rev, "up_299," + name(rev[1:])},
			{`{"upstream_id":"up_150","fallback":true}`, rev, "up_150," + name(rev[:149]) + "," + name(rev[150:])},
			{`{"upstream_id":"up_0","fallback":true}`, rev, name(append(rev[299:], rev[:299]...))},
			{`{"upstream_id":"up_0"}`, nil, ""},
		} {
			b, err := r.BindRouter(d, []byte(c.config), big)
			if err != nil {
				t.Fatal(err)
			}
			for range 2 { // the second call reuses the configured instance
				out, ref, err := b.Route(ctx, &RouteRequest{Model: "m"}, c.cands, make([]uint16, 0, 8))
				if err != nil || ref != nil || name(out) != c.want {
					t.Errorf("%s %s %v: %v %+v %v, want %s", module, c.config, c.cands, name(out), ref, err, c.want)
				}
			}
			b.Release()
		}
		for _, config := range []string{`{"upstream_id":5}`, `{"fallback":"yes"}`} {
			b, _ := r.BindRouter(d, []byte(config), big)
			if _, _, err := b.Route(ctx, &RouteRequest{}, rev, nil); !errors.Is(err, ErrConfig) {
				t.Errorf("%s %s: %v, want a refused configuration", module, config, err)
			}
			b.Release()
		}
	}
}

// A metered guest that never returns runs out of fuel: the call fails as a
// timeout, well within the test's patience, and its instance is thrown
// away; one that traps fails as a trap; the memory cap applies.
func TestMeteredGuestIsInterrupted(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 50 * time.Millisecond})
	router := func(route string) []byte {
		return wat.Assemble(t, `(module (memory (export "memory") 1)
  (func (export "pillar_abi_v2"))
  (func (export "pillar_input") (param i32) (result i32) (i32.const 1024))
  (func (export "pillar_configure") (param i32) (result i64) (i64.const 0))
  (func (export "pillar_route") (param i32) (result i64) `+route+`))`)
	}
	ctx := context.Background()
	for _, c := range []struct {
		route string
		want  error
	}{
		{`(loop $l (br $l)) (i64.const 0)`, ErrTimeout},
		{`unreachable`, ErrTrap},
		// The memory cap holds: growing past it fails, and this guest traps
		// then (were the cap ignored, its empty answer would be garbage).
		{`(if (i32.eq (memory.grow (i32.const 2000)) (i32.const -1)) (then unreachable)) (i64.const 0)`, ErrTrap},
		{`(i64.const 0x7fffffff00000004)`, ErrGarbage},
	} {
		d, _, err := r.Compile(ctx, router(c.route))
		if err != nil || !r.Metered(d) {
			t.Fatalf("%s: %v, metered %v", c.route, err, r.Metered(d))
		}
		b := bind(t, r, d, `{}`)
		for range 2 {
			start := time.Now()
			_, _, err := b.Route(ctx, &RouteRequest{}, all, nil)
			if !errors.Is(err, c.want) {
				t.Errorf("%s: %v, want %v", c.route, err, c.want)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("%s took %s", c.route, time.Since(start))
			}
			if n := b.idle(); n != 0 {
				t.Errorf("%s: %d instances pooled after a failure", c.route, n)
			}
		}
	}
	if got := testutil.ToFloat64(r.calls.WithLabelValues("router", "timeout")); got != 2 {
		t.Errorf("%v timeouts counted, want 2", got)
	}
}

// Unmetered puts every module under the termination checks; the text pin
// router routes the same there.
func TestUnmetered(t *testing.T) {
	r, _ := newRuntime(t, Options{Unmetered: true})
	d := compile(t, r, "pinrouterwat")
	if r.Metered(d) {
		t.Fatal("metered despite Unmetered")
	}
	out, _, err := bind(t, r, d, `{"upstream_id":"up_b","fallback":true}`).Route(context.Background(), &RouteRequest{}, all, nil)
	if err != nil || ids(out) != "up_b,up_a,up_c" {
		t.Fatalf("%v %v", ids(out), err)
	}
}

// The request record carries every field to the guest intact.
func TestRouteRecord(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	b := bind(t, r, compile(t, r, "hostile"), `{"mode":"echo"}`)
	ua := strings.Repeat("u", 6000) // larger than the guest's first buffer
	req := &RouteRequest{PrincipalID: "pr_1", PrincipalName: "app", Model: "claude-sonnet-4-5", Stream: true,
		AnthropicBeta: "b1,b2", AnthropicVersion: "2023-06-01", UserAgent: ua}
	for range 2 {
		_, ref, err := b.Route(context.Background(), req, []uint16{2, 0}, nil)
		want := "pr_1|app|claude-sonnet-4-5|b1,b2|2023-06-01|" + ua + "|stream|2|0"
		if err != nil || ref == nil || ref.Status != 418 || ref.Type != "echo" || ref.Message != want {
			t.Fatalf("echo: %+v %v", ref, err)
		}
		req.UserAgent, ua = "short", "short"
	}
}

// Modules uploaded under ABI v1 (JSON per call) keep routing.
func TestRouteV1(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	d := compile(t, r, "v1router")
	out, ref, err := bind(t, r, d, `{}`).Route(context.Background(), &RouteRequest{}, []uint16{0, 2}, nil)
	if err != nil || ref != nil || ids(out) != "up_c,up_a" {
		t.Fatalf("v1: %v %+v %v", ids(out), ref, err)
	}
	_, ref, err = bind(t, r, d, `{"refuse":true}`).Route(context.Background(), &RouteRequest{Model: "m1"}, all, nil)
	if err != nil || ref == nil || ref.Status != 451 || ref.Type != "permission_error" || ref.Message != "v1 refuses m1" {
		t.Fatalf("v1 refusal: %+v %v", ref, err)
	}
}

// Hostile plugins fail their call and nothing else: the next call of the
// same module works, the failing instance is replaced, and the outcome is
// counted.
func TestHostilePluginsAreContained(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 200 * time.Millisecond, MemoryLimitPages: 512})
	d := compile(t, r, "hostile")
	ctx := context.Background()
	fine := bind(t, r, d, `{"mode":"fine"}`)
	for mode, want := range map[string]error{"trap": ErrTrap, "loop": ErrTimeout, "alloc": ErrTrap, "garbage": ErrGarbage,
		"stranger": ErrGarbage, "twice": ErrGarbage, "badconfig": ErrConfig} {
		b := bind(t, r, d, `{"mode":"`+mode+`"}`)
		for range 2 { // the second call runs on a fresh instance
			start := time.Now()
			_, _, err := b.Route(ctx, &RouteRequest{}, all, nil)
			if mode == "alloc" && errors.Is(err, ErrTimeout) {
				err = ErrTrap // out of memory or out of time: either way contained
			}
			if !errors.Is(err, want) {
				t.Errorf("%s: %v, want %v", mode, err, want)
			}
			if time.Since(start) > 10*time.Second {
				t.Errorf("%s took %s", mode, time.Since(start))
			}
			if n := b.idle(); n != 0 {
				t.Errorf("%s: %d instances pooled after a failure", mode, n)
			}
		}
		out, _, err := fine.Route(ctx, &RouteRequest{}, all, nil)
		if err != nil || len(out) != 3 {
			t.Errorf("after %s: %v %v", mode, out, err)
		}
	}
	counted := func(outcome string) float64 { return testutil.ToFloat64(r.calls.WithLabelValues("router", outcome)) }
	if got := counted("timeout") + counted("trap"); got != 6 {
		t.Errorf("%v timeouts and traps, want 6", got)
	}
	for outcome, n := range map[string]float64{"garbage": 6, "error": 2, "ok": 7} {
		if got := counted(outcome); got != n {
			t.Errorf("svc_plugin_calls_total{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
}

// A call that overruns is interrupted at the time limit, not when the
// guest gives up.
func TestTimeoutInterruptsTheCall(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 50 * time.Millisecond})
	b := bind(t, r, compile(t, r, "hostile"), `{"mode":"loop"}`)
	if err := b.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, _, err := b.Route(context.Background(), &RouteRequest{}, all, nil)
	if !errors.Is(err, ErrTimeout) {
		t.Fatalf("loop: %v", err)
	}
}

// Instances are pooled per binding: concurrent calls are safe and correct,
// and no binding sees another's config.
func TestConcurrentCalls(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 5 * time.Second, PoolSize: 3})
	d := compile(t, r, "pinrouter")
	bs := []*Binding{bind(t, r, d, `{"upstream_id":"up_a"}`), bind(t, r, d, `{"upstream_id":"up_b"}`)}
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]uint16, 0, 4)
			for range 20 {
				out, _, err := bs[i%2].Route(context.Background(), &RouteRequest{}, all, buf)
				if err != nil || ids(out) != table[i%2].ID {
					errs <- fmt.Errorf("%d: %v %v", i, ids(out), err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for _, b := range bs {
		if n := b.idle(); n == 0 || n > 3 {
			t.Errorf("%d idle instances, want 1 to 3", n)
		}
	}
}

// Bindings are shared by identical (module, config, table); after the
// last release a binding stays warm until enough others retire.
func TestBindingsAreSharedAndRetired(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	d := compile(t, r, "pinrouter")
	a, _ := r.BindRouter(d, []byte(`{"upstream_id":"up_a"}`), table)
	b, _ := r.BindRouter(d, []byte(`{"upstream_id":"up_a"}`), table)
	c, _ := r.BindRouter(d, []byte(`{"upstream_id":"up_a"}`), table[:2])
	if a != b || a == c {
		t.Fatalf("shared %v, distinct table %v", a == b, a != c)
	}
	ctx := context.Background()
	for range 2 {
		if err := a.Warm(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.idle() != 2 {
		t.Fatalf("%d pooled after two warm-ups", a.idle())
	}
	a.Release()
	if a.idle() != 2 {
		t.Fatal("released while referenced")
	}
	b.Release()
	c.Release()
	if a.idle() != 1 {
		t.Fatalf("a retired binding keeps %d idle instances, want 1", a.idle())
	}
	again, _ := r.BindRouter(d, []byte(`{"upstream_id":"up_a"}`), table)
	if again != a {
		t.Fatal("a retired binding was not bound again")
	}
	again.Release()
	for i := range retiredBindings {
		o, _ := r.BindRouter(d, []byte(fmt.Sprintf(`{"upstream_id":"up_%d"}`, i)), table)
		o.Release()
	}
	if !a.closed.Load() || a.idle() != 0 {
		t.Fatal("the oldest retired binding was not closed")
	}
	fresh, _ := r.BindRouter(d, []byte(`{"upstream_id":"up_a"}`), table)
	defer fresh.Release()
	if fresh == a {
		t.Fatal("a closed binding was handed out again")
	}
	// A call on a closed binding (an old snapshot's request) still works.
	if out, _, err := a.Route(ctx, &RouteRequest{}, all, nil); err != nil || ids(out) != "up_a" {
		t.Fatalf("closed binding: %v %v", ids(out), err)
	}
	if a.idle() != 0 {
		t.Fatal("a closed binding pooled an instance")
	}
}

func TestShapeWarmup(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	d := compile(t, r, "dialect")
	body, hdr, err := r.ShapeWarmup(context.Background(), d, Candidate{ID: "up_x"}, []byte(`{"model":"claude-haiku-4-5","max_tokens":1,"messages":[]}`), nil)
	if err != nil || !strings.Contains(string(body), "claude-3-5-haiku-latest") || !strings.Contains(string(body), "warmup-up_x") || hdr["x-warmup-dialect"] != "sample" {
		t.Fatalf("shape: %s %v %v", body, hdr, err)
	}
}

// BenchmarkRoute is the per-request cost of a router plugin (ABI v2, the
// sample pin router): one call on a pooled, configured instance.
func BenchmarkRoute(b *testing.B) { benchmarkRoute(b, "pinrouter", Options{}) }

// BenchmarkRouteWAT is BenchmarkRoute with the same router written in
// WebAssembly text (no guest runtime).
func BenchmarkRouteWAT(b *testing.B) { benchmarkRoute(b, "pinrouterwat", Options{}) }

// BenchmarkRouteWATChecked runs it under wazero's termination checks
// instead of metered: what the watcher goroutine per call costs.
func BenchmarkRouteWATChecked(b *testing.B) {
	benchmarkRoute(b, "pinrouterwat", Options{Unmetered: true})
}

func benchmarkRoute(b *testing.B, module string, o Options) {
	r, _ := newRuntime(b, o)
	r.o.CallTimeout = 5 * time.Second // a loaded machine must not fail the run
	bd := bind(b, r, compile(b, r, module), `{"upstream_id":"up_b","fallback":true}`)
	req := &RouteRequest{PrincipalID: "pr_1", PrincipalName: "app", Model: "claude-sonnet-4-5", AnthropicVersion: "2023-06-01"}
	dst := make([]uint16, 0, 8)
	ctx := context.Background()
	if err := bd.Warm(ctx); err != nil { // the instance starts outside the measured calls
		b.Fatal(err)
	}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		out, _, err := bd.Route(ctx, req, all, dst)
		if err != nil || len(out) != 3 || out[0] != 1 || out[1] != 0 || out[2] != 2 {
			b.Fatal(ids(out), err)
		}
	}
}

// BenchmarkRouteV1 is the same choice by an ABI v1 module (JSON per call).
func BenchmarkRouteV1(b *testing.B) {
	r, _ := newRuntime(b, Options{CallTimeout: 5 * time.Second})
	bd := bind(b, r, compile(b, r, "v1router"), `{}`)
	req := &RouteRequest{PrincipalID: "pr_1", PrincipalName: "app", Model: "claude-sonnet-4-5", AnthropicVersion: "2023-06-01"}
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if _, _, err := bd.Route(context.Background(), req, all, nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkCallFloor is the floor under BenchmarkRoute measured in the
// same run: a call of an empty export (pillar_abi_v2) on a pooled
// instance, through the same watchdog and termination checks.
func BenchmarkCallFloor(b *testing.B) {
	r, _ := newRuntime(b, Options{CallTimeout: 5 * time.Second})
	bd := bind(b, r, compile(b, r, "pinrouter"), `{}`)
	in, err := bd.instance(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	defer bd.put(in)
	fn := in.mod.ExportedFunction(ExportABIv2)
	b.ReportAllocs()
	defer reportCPU(b)()
	for b.Loop() {
		if err := in.run(fn, r.o.CallTimeout); err != nil {
			b.Fatal(err)
		}
	}
}

// reportCPU adds the process's CPU time per operation (user and system,
// every goroutine, wazero's watchers included) to a benchmark's results:
// on a loaded machine it moves far less than the wall clock does. Call
// the function it returns when the loop ends.
func reportCPU(b *testing.B) func() {
	start := cputime.Process()
	return func() { b.ReportMetric(float64(cputime.Process()-start)/float64(b.N), "cpu-ns/op") }
}

// An ABI v2 router call is always counted; its duration is sampled, one
// call in timedEvery of each instance, the instance's first included.
func TestRouteDurationSampled(t *testing.T) {
	r, reg := newRuntime(t, Options{})
	bd := bind(t, r, compile(t, r, "pinrouterwat"), `{"upstream_id":"up_b"}`)
	ctx := context.Background()
	timed := func() float64 {
		fs, err := promtest.Gather(reg)
		if err != nil {
			t.Fatal(err)
		}
		n, _ := fs.Value("svc_plugin_call_duration_seconds", "slot", "router")
		return n
	}
	// Sequential calls reuse the binding's one instance.
	for i := range 2*timedEvery + 1 {
		if out, _, err := bd.Route(ctx, &RouteRequest{}, all, nil); err != nil || ids(out) != "up_b" {
			t.Fatalf("call %d: %v %v", i, ids(out), err)
		}
		if want := float64(i/timedEvery + 1); timed() != want {
			t.Fatalf("after call %d: %v timed, want %v", i+1, timed(), want)
		}
	}
	if got := testutil.ToFloat64(r.calls.WithLabelValues("router", "ok")); got != 2*timedEvery+1 {
		t.Fatalf("%v calls counted", got)
	}
}
