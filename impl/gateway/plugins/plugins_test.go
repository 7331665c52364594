package plugins

import (
	"context"
	"encoding/json"
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
)

// modules are the sample plugins of fixtures/plugins, built once.
var modules = map[string][]byte{}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "plugins")
	if err != nil {
		panic(err)
	}
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	for _, name := range []string{"modelrouter", "pinrouter", "hostile", "dialect"} {
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
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

func newRuntime(t testing.TB, o Options) (*Runtime, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	o.Registerer = reg
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

var cands = []Candidate{{ID: "up_a", Kind: "vendor_oauth", Healthy: true}, {ID: "up_b", Kind: "vendor_api_key", Healthy: true}}

func TestCompileReadsSlots(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	for name, want := range map[string]string{"modelrouter": "router", "pinrouter": "router", "hostile": "router", "dialect": "warmup_dialect"} {
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

// Routing decided by a plugin's config; refusals.
func TestRoute(t *testing.T) {
	r, _ := newRuntime(t, Options{})
	d := compile(t, r, "modelrouter")
	in := &RouteInput{Model: "claude-haiku-4-5", Candidates: cands, Config: json.RawMessage(`{"routes":{"claude-haiku":["up_b"]}}`)}
	out, err := r.Route(context.Background(), d, in)
	if err != nil || strings.Join(out.Upstreams, ",") != "up_b" {
		t.Fatalf("route: %+v %v", out, err)
	}
	in.Model = "claude-opus-4"
	in.Config = json.RawMessage(`{"routes":{"claude-haiku":["up_b"]},"default":"refuse"}`)
	out, err = r.Route(context.Background(), d, in)
	if err != nil || out.Refuse == nil || out.Refuse.Status != 403 || !strings.Contains(out.Refuse.Message, "claude-opus-4") {
		t.Fatalf("refusal: %+v %v", out, err)
	}
	p := compile(t, r, "pinrouter")
	out, err = r.Route(context.Background(), p, &RouteInput{Candidates: cands, Config: json.RawMessage(`{"upstream_id":"up_b","fallback":true}`)})
	if err != nil || strings.Join(out.Upstreams, ",") != "up_b,up_a" {
		t.Fatalf("pin: %+v %v", out, err)
	}
	if _, err := r.Route(context.Background(), "0000", in); !errors.Is(err, ErrNotLoaded) {
		t.Fatalf("unknown digest: %v", err)
	}
	if _, err := r.Call(context.Background(), d, "warmup_dialect", []byte("{}")); !errors.Is(err, ErrNoSlot) {
		t.Fatalf("missing slot: %v", err)
	}
}

// Hostile plugins fail their call and nothing else: the next call of the
// same module works, and the outcome is counted.
func TestHostilePluginsAreContained(t *testing.T) {
	r, reg := newRuntime(t, Options{CallTimeout: 200 * time.Millisecond, MemoryLimitPages: 512})
	_ = reg
	d := compile(t, r, "hostile")
	for mode, want := range map[string]error{"trap": ErrTrap, "loop": ErrTimeout, "alloc": ErrTrap, "garbage": ErrGarbage, "stranger": ErrGarbage} {
		start := time.Now()
		_, err := r.Route(context.Background(), d, &RouteInput{Candidates: cands, Config: json.RawMessage(`{"mode":"` + mode + `"}`)})
		if mode == "alloc" && errors.Is(err, ErrTimeout) {
			err = ErrTrap // out of memory or out of time: either way contained
		}
		if !errors.Is(err, want) {
			t.Errorf("%s: %v, want %v", mode, err, want)
		}
		if time.Since(start) > 10*time.Second {
			t.Errorf("%s took %s", mode, time.Since(start))
		}
		out, err := r.Route(context.Background(), d, &RouteInput{Candidates: cands, Config: json.RawMessage(`{"mode":"fine"}`)})
		if err != nil || len(out.Upstreams) != 2 {
			t.Errorf("after %s: %+v %v", mode, out, err)
		}
	}
	timeouts := testutil.ToFloat64(r.calls.WithLabelValues("router", "timeout"))
	traps := testutil.ToFloat64(r.calls.WithLabelValues("router", "trap"))
	if timeouts+traps != 3 {
		t.Errorf("%v timeouts and %v traps, want 3 in all", timeouts, traps)
	}
	for outcome, n := range map[string]float64{"garbage": 2, "ok": 5} {
		if got := testutil.ToFloat64(r.calls.WithLabelValues("router", outcome)); got != n {
			t.Errorf("svc_plugin_calls_total{outcome=%q} = %v, want %v", outcome, got, n)
		}
	}
}

// Instances are pooled: concurrent calls are safe and correct.
func TestConcurrentCalls(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 5 * time.Second})
	d := compile(t, r, "pinrouter")
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := cands[i%2].ID
			out, err := r.Route(context.Background(), d, &RouteInput{Candidates: cands, Config: json.RawMessage(`{"upstream_id":"` + id + `"}`)})
			if err != nil || len(out.Upstreams) != 1 || out.Upstreams[0] != id {
				errs <- fmt.Errorf("%s: %+v %v", id, out, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
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

// BenchmarkRoute is the per-request cost of a router plugin.
func BenchmarkRoute(b *testing.B) {
	r, _ := newRuntime(b, Options{})
	d := compile(b, r, "pinrouter")
	in := &RouteInput{Model: "claude-sonnet-4-5", Candidates: cands, Config: json.RawMessage(`{"upstream_id":"up_b"}`)}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := r.Route(context.Background(), d, in); err != nil {
			b.Fatal(err)
		}
	}
}
