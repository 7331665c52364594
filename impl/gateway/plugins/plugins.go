// Package plugins runs WASM plugins with wazero under the plugin ABI v1
// (docs/plugins.md): modules are validated and compiled once per digest
// and shared, instances are pooled, and every call runs under a time limit
// and a memory cap. A plugin that traps, runs out of time or memory, or
// answers garbage fails the call with an error; the process never
// crashes and the broken instance is thrown away.
package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// ABI v1 exports.
const (
	ExportABI         = "pillar_abi_v1"
	ExportAlloc       = "pillar_alloc"
	ExportRoute       = "pillar_route"
	ExportWarmupShape = "pillar_warmup_shape"
)

// Slots and the export serving each.
var slotExports = map[string]string{"router": ExportRoute, "warmup_dialect": ExportWarmupShape}

// Errors of a call; each is counted by svc_plugin_calls_total{outcome}.
var (
	ErrInvalidModule = errors.New("invalid plugin module")
	ErrNoSlot        = errors.New("the plugin does not support this slot")
	ErrTimeout       = errors.New("plugin call exceeded its time limit")
	ErrTrap          = errors.New("plugin trapped")
	ErrGarbage       = errors.New("plugin answered garbage")
	ErrNotLoaded     = errors.New("plugin module not loaded")
)

// MaxModuleBytes bounds an uploaded module.
const MaxModuleBytes = 32 << 20

// Options configures a Runtime.
type Options struct {
	// MemoryLimitPages caps each instance's memory (64 KiB pages; default
	// 1024 = 64 MiB).
	MemoryLimitPages uint32
	// CallTimeout bounds one call (default 50 ms).
	CallTimeout time.Duration
	// PoolSize is how many idle instances per module are kept (default 8).
	PoolSize int
	// MaxOutputBytes bounds a plugin's answer (default 1 MiB).
	MaxOutputBytes int
	Registerer     prometheus.Registerer
}

// Runtime holds compiled modules and their instance pools.
type Runtime struct {
	o     Options
	rt    wazero.Runtime
	calls *prometheus.CounterVec
	dur   *prometheus.HistogramVec

	mu   sync.Mutex
	mods map[string]*module
}

type module struct {
	digest   string
	compiled wazero.CompiledModule
	slots    []string
	pool     chan api.Module
}

// New starts a runtime; Close releases it.
func New(ctx context.Context, o Options) (*Runtime, error) {
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = 1024
	}
	if o.CallTimeout <= 0 {
		o.CallTimeout = 50 * time.Millisecond
	}
	if o.PoolSize <= 0 {
		o.PoolSize = 8
	}
	if o.MaxOutputBytes <= 0 {
		o.MaxOutputBytes = 1 << 20
	}
	cfg := wazero.NewRuntimeConfig().WithMemoryLimitPages(o.MemoryLimitPages).WithCloseOnContextDone(true)
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	r := &Runtime{o: o, rt: rt, mods: map[string]*module{}}
	r.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_plugin_calls_total",
		Help: "WASM plugin calls by slot and outcome (ok, timeout, trap, garbage, error)."}, []string{"slot", "outcome"})
	r.dur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "svc_plugin_call_duration_seconds",
		Help: "Duration of WASM plugin calls.", Buckets: []float64{1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1}}, []string{"slot"})
	if o.Registerer != nil {
		o.Registerer.MustRegister(r.calls, r.dur)
	}
	for slot := range slotExports {
		for _, out := range []string{"ok", "timeout", "trap", "garbage", "error"} {
			r.calls.WithLabelValues(slot, out)
		}
	}
	return r, nil
}

// Close releases every module and instance.
func (r *Runtime) Close(ctx context.Context) error { return r.rt.Close(ctx) }

// Digest is the hex SHA-256 of a module.
func Digest(wasm []byte) string {
	h := sha256.Sum256(wasm)
	return hex.EncodeToString(h[:])
}

// Compile validates and compiles a module (once per digest) and returns
// its digest and the slots its exports support.
func (r *Runtime) Compile(ctx context.Context, wasm []byte) (string, []string, error) {
	if len(wasm) > MaxModuleBytes {
		return "", nil, fmt.Errorf("%w: larger than %d bytes", ErrInvalidModule, MaxModuleBytes)
	}
	digest := Digest(wasm)
	r.mu.Lock()
	m := r.mods[digest]
	r.mu.Unlock()
	if m != nil {
		return digest, m.slots, nil
	}
	compiled, err := r.rt.CompileModule(ctx, wasm)
	if err != nil {
		return "", nil, fmt.Errorf("%w: %v", ErrInvalidModule, err)
	}
	exports := compiled.ExportedFunctions()
	if _, ok := exports[ExportABI]; !ok {
		compiled.Close(ctx)
		return "", nil, fmt.Errorf("%w: no %s export (not a plugin of ABI v1)", ErrInvalidModule, ExportABI)
	}
	if f, ok := exports[ExportAlloc]; !ok || !sig(f, []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}) {
		compiled.Close(ctx)
		return "", nil, fmt.Errorf("%w: %s(i32) -> i32 missing", ErrInvalidModule, ExportAlloc)
	}
	var slots []string
	for slot, name := range slotExports {
		f, ok := exports[name]
		if !ok {
			continue
		}
		if !sig(f, []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}) {
			compiled.Close(ctx)
			return "", nil, fmt.Errorf("%w: %s must be (i32, i32) -> i64", ErrInvalidModule, name)
		}
		slots = append(slots, slot)
	}
	sort.Strings(slots)
	if len(slots) == 0 {
		compiled.Close(ctx)
		return "", nil, fmt.Errorf("%w: exports no slot (%s or %s)", ErrInvalidModule, ExportRoute, ExportWarmupShape)
	}
	m = &module{digest: digest, compiled: compiled, slots: slots, pool: make(chan api.Module, r.o.PoolSize)}
	// One instance proves the module starts (its initialisation runs).
	inst, err := r.instantiate(ctx, m)
	if err != nil {
		compiled.Close(ctx)
		return "", nil, fmt.Errorf("%w: it does not start: %v", ErrInvalidModule, err)
	}
	m.pool <- inst
	r.mu.Lock()
	if old := r.mods[digest]; old != nil {
		r.mu.Unlock()
		inst.Close(ctx)
		compiled.Close(ctx)
		return digest, old.slots, nil
	}
	r.mods[digest] = m
	r.mu.Unlock()
	return digest, slots, nil
}

func sig(f api.FunctionDefinition, params, results []api.ValueType) bool {
	eq := func(a, b []api.ValueType) bool {
		if len(a) != len(b) {
			return false
		}
		for i := range a {
			if a[i] != b[i] {
				return false
			}
		}
		return true
	}
	return eq(f.ParamTypes(), params) && eq(f.ResultTypes(), results)
}

func (r *Runtime) instantiate(ctx context.Context, m *module) (api.Module, error) {
	// Start-up gets a longer budget than a call: the guest runtime boots.
	ictx, cancel := context.WithTimeout(ctx, max(r.o.CallTimeout*20, 2*time.Second))
	defer cancel()
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	return r.rt.InstantiateModule(ictx, m.compiled, cfg)
}

// Loaded reports whether a digest is compiled.
func (r *Runtime) Loaded(digest string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mods[digest] != nil
}

// Call runs a slot's export of the module with input and returns its answer.
func (r *Runtime) Call(ctx context.Context, digest, slot string, input []byte) (out []byte, err error) {
	defer r.observe(slot, time.Now(), &err)
	return r.call(ctx, digest, slot, input)
}

// observe counts a call's outcome and duration.
func (r *Runtime) observe(slot string, start time.Time, err *error) {
	r.dur.WithLabelValues(slot).Observe(time.Since(start).Seconds())
	r.calls.WithLabelValues(slot, outcome(*err)).Inc()
}

func (r *Runtime) call(ctx context.Context, digest, slot string, input []byte) (out []byte, err error) {
	r.mu.Lock()
	m := r.mods[digest]
	r.mu.Unlock()
	if m == nil {
		return nil, ErrNotLoaded
	}
	export, ok := slotExports[slot]
	if !ok || !contains(m.slots, slot) {
		return nil, ErrNoSlot
	}
	var inst api.Module
	select {
	case inst = <-m.pool:
	default:
		if inst, err = r.instantiate(ctx, m); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTrap, err)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, r.o.CallTimeout)
	defer cancel()
	out, err = invoke(cctx, inst, export, input, r.o.MaxOutputBytes)
	if err != nil {
		// A failed instance may be in any state: never reuse it.
		inst.Close(context.Background())
		if cctx.Err() != nil && ctx.Err() == nil {
			return nil, ErrTimeout
		}
		return nil, err
	}
	select {
	case m.pool <- inst:
	default:
		inst.Close(context.Background())
	}
	return out, nil
}

func contains(xs []string, x string) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func outcome(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, ErrTimeout):
		return "timeout"
	case errors.Is(err, ErrTrap):
		return "trap"
	case errors.Is(err, ErrGarbage):
		return "garbage"
	}
	return "error"
}

// invoke writes input into the guest, calls export and copies the answer out.
func invoke(ctx context.Context, inst api.Module, export string, input []byte, maxOut int) ([]byte, error) {
	res, err := inst.ExportedFunction(ExportAlloc).Call(ctx, uint64(len(input)))
	if err != nil {
		return nil, fmt.Errorf("%w: alloc: %v", ErrTrap, err)
	}
	ptr := uint32(res[0])
	mem := inst.Memory()
	if len(input) > 0 && !mem.Write(ptr, input) {
		return nil, fmt.Errorf("%w: alloc returned memory out of range", ErrGarbage)
	}
	res, err = inst.ExportedFunction(export).Call(ctx, uint64(ptr), uint64(len(input)))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrTrap, err)
	}
	outPtr, outLen := uint32(res[0]>>32), uint32(res[0])
	if int(outLen) > maxOut {
		return nil, fmt.Errorf("%w: answer of %d bytes", ErrGarbage, outLen)
	}
	b, ok := mem.Read(outPtr, outLen)
	if !ok {
		return nil, fmt.Errorf("%w: answer out of memory range", ErrGarbage)
	}
	return append([]byte(nil), b...), nil
}
