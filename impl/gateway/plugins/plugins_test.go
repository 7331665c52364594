package plugins

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/tetratelabs/wazero"
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
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
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
		out := filepath.Join(dir, name+".wasm")
		src := filepath.Join(root, "fixtures", "plugins", name, strings.TrimSuffix(name, "wat")+".wat")
		if b, err := exec.Command("wat2wasm", "-o", out, src).CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s (wat2wasm comes with Debian's wabt: scripts/setup.sh): %v\n%s", name, err, b)
			os.Exit(2)
		}
		modules[name], _ = os.ReadFile(out)
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
	p := compile(t, r, "pinrouter")
	for cfg, want := range map[string]string{`{"upstream_id":"up_b","fallback":true}`: "up_b,up_a,up_c",
		`{"upstream_id":"up_b"}`: "up_b", `{"upstream_id":"up_zzz"}`: "up_a,up_b,up_c"} {
		out, _, err := bind(t, r, p, cfg).Route(ctx, &RouteRequest{}, all, make([]uint16, 0, 8))
		if err != nil || ids(out) != want {
			t.Errorf("pin %s: %v %v, want %s", cfg, ids(out), err, want)
		}
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
			if n := len(b.pool); n != 0 {
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
		if n := len(b.pool); n == 0 || n > 3 {
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
	if len(a.pool) != 2 {
		t.Fatalf("%d pooled after two warm-ups", len(a.pool))
	}
	a.Release()
	if len(a.pool) != 2 {
		t.Fatal("released while referenced")
	}
	b.Release()
	c.Release()
	if len(a.pool) != 1 {
		t.Fatalf("a retired binding keeps %d idle instances, want 1", len(a.pool))
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
	if !a.closed.Load() || len(a.pool) != 0 {
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
	if len(a.pool) != 0 {
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
func BenchmarkRoute(b *testing.B) { benchmarkRoute(b, "pinrouter") }

// BenchmarkRouteWAT is BenchmarkRoute with the same router written in
// WebAssembly text (no guest runtime).
func BenchmarkRouteWAT(b *testing.B) { benchmarkRoute(b, "pinrouterwat") }

func benchmarkRoute(b *testing.B, module string) {
	r, _ := newRuntime(b, Options{})
	r.o.CallTimeout = 5 * time.Second // a loaded machine must not fail the run
	bd := bind(b, r, compile(b, r, module), `{"upstream_id":"up_b","fallback":true}`)
	req := &RouteRequest{PrincipalID: "pr_1", PrincipalName: "app", Model: "claude-sonnet-4-5", AnthropicVersion: "2023-06-01"}
	dst := make([]uint16, 0, 8)
	ctx := context.Background()
	if err := bd.Warm(ctx); err != nil { // the instance starts outside the measured calls
		b.Fatal(err)
	}
	b.ReportAllocs()
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
	for b.Loop() {
		if err := in.run(fn, r.o.CallTimeout); err != nil {
			b.Fatal(err)
		}
	}
}
