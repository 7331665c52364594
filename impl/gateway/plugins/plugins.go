// Package plugins runs WASM plugins with wazero under the plugin ABIs of
// docs/plugins.md: modules are validated and compiled once per digest and
// shared, instances are pooled and reused (a guest's runtime starts once
// per instance, not per call), and every call runs under a time limit and
// a memory cap. A plugin that traps, runs out of time or memory, or answers
// garbage fails the call with an error; the process never crashes and the
// broken instance is thrown away.
//
// Router plugins of ABI v2 are bound (Runtime.BindRouter) to their chain
// entry's config and the snapshot's upstream table once; each call then
// exchanges a small binary record through a buffer the instance keeps, with
// no allocation on the host. ABI v1 modules (JSON per call) still run.
//
// Modules that import nothing and use only instructions package fuel can
// meter run metered, in a runtime without wazero's termination checks: a
// guest loop is stopped by its fuel running out instead of by a watcher
// goroutine started for every call. Every other module (Go modules import
// WASI) runs with the checks and a watchdog per instance.
package plugins

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/plugins/fuel"
	"github.com/pillarhq/pillar/impl/service"
)

// Exports of the plugin ABIs.
const (
	ExportABIv1       = "pillar_abi_v1"
	ExportABIv2       = "pillar_abi_v2"
	ExportAlloc       = "pillar_alloc"     // v1: a fresh input buffer per call
	ExportInput       = "pillar_input"     // v2: the instance's reusable input buffer
	ExportConfigure   = "pillar_configure" // v2 routers: the setup document, once per instance
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
	ErrConfig        = errors.New("plugin refused its configuration")
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
	// PoolSize is how many idle instances per module or binding are kept
	// (default 8).
	PoolSize int
	// MaxOutputBytes bounds a plugin's answer (default 1 MiB).
	MaxOutputBytes int
	Registerer     prometheus.Registerer
	// CompilationCache, when set, shares compiled code between runtimes
	// (tests build many runtimes of the same modules). Metered modules are
	// never put in it: their code has no termination checks, and a shared
	// cache must not hand it to a runtime that expects them.
	CompilationCache wazero.CompilationCache
	// Unmetered runs every module under wazero's termination checks, as
	// before metering existed (benchmarks compare the two).
	Unmetered bool
	// Clock ticks the reaper of metered calls (nil: the real clock).
	Clock clock.Clock
}

// Runtime holds compiled modules, router bindings and their instance pools.
type Runtime struct {
	o  Options
	rt wazero.Runtime
	// fast runs metered modules: no termination checks compiled in, so a
	// call starts no watcher goroutine; fuel bounds the guest instead.
	fast  wazero.Runtime
	calls *prometheus.CounterVec
	dur   *prometheus.HistogramVec
	// obs holds each slot's metric children, resolved once so that a call
	// does no label lookup.
	obs map[string]*slotMetrics

	// live holds the metered instances, which reap watches on ticks of
	// ticker (a timer on Clock, re-armed after each tick), running only
	// while live is not empty (ticking); reapTicks counts the ticks reap
	// handled. stopReap ends reap and reaped says it ended.
	service.Base
	liveMu    sync.Mutex
	live      map[*instance]struct{}
	ticker    clock.Timer
	ticks     <-chan time.Time
	ticking   bool
	reapTicks atomic.Uint64
	stopReap  chan struct{}
	reaped    chan struct{}
	closeOnce sync.Once

	mu       sync.Mutex
	mods     map[string]*module
	bindings map[string]*Binding
	retired  []*Binding // unreferenced bindings kept warm, oldest first
}

type slotMetrics struct {
	dur                                    prometheus.Observer
	ok, timeout, trap, garbage, otherError prometheus.Counter
}

type module struct {
	digest   string
	rt       wazero.Runtime // the runtime that compiled it
	compiled wazero.CompiledModule
	metered  bool
	abi      int
	slots    []string
	// pool holds instances for JSON-document calls (every slot of v1, the
	// warm-up slot of v2); v2 router bindings keep their own.
	pool chan *instance
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
	// CloseOnContextDone compiles the termination checks into guest code:
	// without them a guest loop could not be interrupted. Calls pass their
	// instance's own context, which its watchdog cancels (instance.run).
	cfg := wazero.NewRuntimeConfig().WithMemoryLimitPages(o.MemoryLimitPages).WithCloseOnContextDone(true)
	if o.CompilationCache != nil {
		cfg = cfg.WithCompilationCache(o.CompilationCache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	fast := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithMemoryLimitPages(o.MemoryLimitPages))
	r := &Runtime{o: o, rt: rt, fast: fast, mods: map[string]*module{}, bindings: map[string]*Binding{}, obs: map[string]*slotMetrics{},
		live: map[*instance]struct{}{}, stopReap: make(chan struct{}), reaped: make(chan struct{})}
	r.calls = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "svc_plugin_calls_total",
		Help: "WASM plugin calls by slot and outcome (ok, timeout, trap, garbage, error)."}, []string{"slot", "outcome"})
	r.dur = prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "svc_plugin_call_duration_seconds",
		Help: "Duration of WASM plugin calls; router calls of ABI v2 are sampled, one in 8 of each instance timed (svc_plugin_calls_total counts every call).", Buckets: []float64{1e-6, 5e-6, 1e-5, 5e-5, 1e-4, 5e-4, 1e-3, 5e-3, 0.01, 0.05, 0.1}}, []string{"slot"})
	if o.Registerer != nil {
		o.Registerer.MustRegister(r.calls, r.dur)
	}
	for slot := range slotExports {
		r.obs[slot] = &slotMetrics{dur: r.dur.WithLabelValues(slot),
			ok: r.calls.WithLabelValues(slot, "ok"), timeout: r.calls.WithLabelValues(slot, "timeout"),
			trap: r.calls.WithLabelValues(slot, "trap"), garbage: r.calls.WithLabelValues(slot, "garbage"),
			otherError: r.calls.WithLabelValues(slot, "error")}
	}
	// Stopped until the first metered instance: a runtime with none
	// (plugins unused, or every module on the checked runtime) wakes for
	// nothing.
	service.Init(service.Options{Clock: o.Clock}, r)
	r.ticker, r.ticks = r.Clock.NewTimer(o.CallTimeout)
	r.ticker.Stop()
	// Last: nothing above may fail and leave it running.
	go r.reap()
	return r, nil
}

// compiledCode: wazero compiles guest code to machine code here. Metering
// relies on it: reap sets a call's stop flag from its own goroutine while
// the guest runs, and compiled code re-reads the global at every charge;
// wazero's interpreter (other architectures) reads it in Go code, where
// that concurrent write would be a data race.
var compiledCode = runtime.GOARCH == "amd64" || runtime.GOARCH == "arm64"

// Close releases every module and instance; a second call does nothing.
func (r *Runtime) Close(ctx context.Context) error {
	var err error
	r.closeOnce.Do(func() {
		close(r.stopReap)
		<-r.reaped
		r.liveMu.Lock()
		r.ticker.Stop()
		r.ticking = false
		r.liveMu.Unlock()
		err = errors.Join(r.fast.Close(ctx), r.rt.Close(ctx))
	})
	return err
}

// Metered reports whether a compiled module runs metered (package fuel)
// rather than under wazero's termination checks.
func (r *Runtime) Metered(digest string) bool {
	m := r.module(digest)
	return m != nil && m.metered
}

// fuelPerCall is the fuel of a call that may take timeout: one unit per
// two nanoseconds. A unit pays for one instruction; the tightest loop (a
// branch, plus the charge itself on every iteration) spends 50 ms worth in
// 75-100 ms on a loaded 2-core machine, larger loop bodies spend it faster,
// so a guest that spends it all has run for about the limit or less.
func fuelPerCall(timeout time.Duration) uint64 { return uint64(timeout.Nanoseconds() / 2) }

// startTimeout is what an instance's start may take: the guest runtime
// boots.
func (r *Runtime) startTimeout() time.Duration { return max(r.o.CallTimeout*20, 2*time.Second) }

// Digest is the hex SHA-256 of a module.
func Digest(wasm []byte) string {
	h := sha256.Sum256(wasm)
	return hex.EncodeToString(h[:])
}

var (
	sigI32I32   = [2][]api.ValueType{{api.ValueTypeI32}, {api.ValueTypeI32}}
	sigI32I64   = [2][]api.ValueType{{api.ValueTypeI32}, {api.ValueTypeI64}}
	sigPtrLen64 = [2][]api.ValueType{{api.ValueTypeI32, api.ValueTypeI32}, {api.ValueTypeI64}}
)

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
	abi, slots, err := checkExports(compiled.ExportedFunctions())
	if err != nil {
		compiled.Close(ctx)
		return "", nil, err
	}
	m = &module{digest: digest, rt: r.rt, compiled: compiled, abi: abi, slots: slots, pool: make(chan *instance, r.o.PoolSize)}
	// Metered only after the checked runtime validated the module as it
	// was uploaded: a rewrite must not make an invalid module valid (its
	// code could name the fuel global).
	if !r.o.Unmetered && compiledCode {
		if metered, err := fuel.Meter(wasm, fuelPerCall(r.startTimeout())); err == nil {
			if fc, err := r.fast.CompileModule(ctx, metered); err == nil {
				compiled.Close(ctx)
				m.rt, m.compiled, m.metered = r.fast, fc, true
			}
		}
	}
	// One instance proves the module starts (its initialisation runs).
	inst, err := r.instantiate(ctx, m)
	if err != nil {
		m.compiled.Close(ctx)
		return "", nil, fmt.Errorf("%w: it does not start: %v", ErrInvalidModule, err)
	}
	if m.abi == 2 && !contains(slots, "warmup_dialect") {
		// A v2 router runs only in its bindings' pools.
		inst.close()
	} else {
		m.pool <- inst
	}
	r.mu.Lock()
	if old := r.mods[digest]; old != nil {
		r.mu.Unlock()
		for len(m.pool) > 0 {
			(<-m.pool).close()
		}
		m.compiled.Close(ctx)
		return digest, old.slots, nil
	}
	r.mods[digest] = m
	r.mu.Unlock()
	return digest, slots, nil
}

// checkExports reads a module's ABI version and slots from its exports.
func checkExports(exports map[string]api.FunctionDefinition) (int, []string, error) {
	has := func(name string, sig [2][]api.ValueType) (bool, error) {
		f, ok := exports[name]
		if !ok {
			return false, nil
		}
		if !eqTypes(f.ParamTypes(), sig[0]) || !eqTypes(f.ResultTypes(), sig[1]) {
			return true, fmt.Errorf("%w: %s must be %v -> %v", ErrInvalidModule, name, sig[0], sig[1])
		}
		return true, nil
	}
	abi := 0
	switch {
	case exports[ExportABIv2] != nil:
		abi = 2
	case exports[ExportABIv1] != nil:
		abi = 1
	default:
		return 0, nil, fmt.Errorf("%w: no %s or %s export (not a pillar plugin)", ErrInvalidModule, ExportABIv2, ExportABIv1)
	}
	// Each ABI: its input-buffer export and each slot's signature.
	input, slotSig := ExportAlloc, map[string][2][]api.ValueType{"router": sigPtrLen64, "warmup_dialect": sigPtrLen64}
	if abi == 2 {
		input, slotSig = ExportInput, map[string][2][]api.ValueType{"router": sigI32I64, "warmup_dialect": sigI32I64}
	}
	if ok, err := has(input, sigI32I32); err != nil || !ok {
		return 0, nil, fmt.Errorf("%w: ABI v%d needs %s(i32) -> i32", ErrInvalidModule, abi, input)
	}
	var slots []string
	for slot, name := range slotExports {
		ok, err := has(name, slotSig[slot])
		if err != nil {
			return 0, nil, err
		}
		if ok {
			slots = append(slots, slot)
		}
	}
	sort.Strings(slots)
	if len(slots) == 0 {
		return 0, nil, fmt.Errorf("%w: exports no slot (%s or %s)", ErrInvalidModule, ExportRoute, ExportWarmupShape)
	}
	if abi == 2 && contains(slots, "router") {
		if ok, err := has(ExportConfigure, sigI32I64); err != nil || !ok {
			return 0, nil, fmt.Errorf("%w: an ABI v2 router needs %s(i32) -> i64", ErrInvalidModule, ExportConfigure)
		}
	}
	return abi, slots, nil
}

func eqTypes(a, b []api.ValueType) bool {
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

// Loaded reports whether a digest is compiled.
func (r *Runtime) Loaded(digest string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mods[digest] != nil
}

func (r *Runtime) module(digest string) *module {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.mods[digest]
}

// Call runs a slot's export of the module with a JSON document and returns
// its answer (ABI v1 slots, and the warm-up slot of v2).
func (r *Runtime) Call(ctx context.Context, digest, slot string, input []byte) (out []byte, err error) {
	defer r.obs[slot].observe(sinceEpoch(), &err)
	return r.call(ctx, digest, slot, input)
}

// epoch anchors sinceEpoch.
var epoch = time.Now()

// sinceEpoch reads the monotonic clock only: time.Now reads the wall clock
// too, and a clock read is a large part of a plugin call's cost.
func sinceEpoch() time.Duration { return time.Since(epoch) }

// observe counts a call's outcome and the duration since start
// (sinceEpoch).
func (m *slotMetrics) observe(start time.Duration, err *error) {
	m.dur.Observe((sinceEpoch() - start).Seconds())
	m.count(err)
}

// count counts a call's outcome.
func (m *slotMetrics) count(err *error) {
	switch e := *err; {
	case e == nil:
		m.ok.Inc()
	case errors.Is(e, ErrTimeout):
		m.timeout.Inc()
	case errors.Is(e, ErrTrap):
		m.trap.Inc()
	case errors.Is(e, ErrGarbage):
		m.garbage.Inc()
	default:
		m.otherError.Inc()
	}
}

func (r *Runtime) call(ctx context.Context, digest, slot string, input []byte) (out []byte, err error) {
	m := r.module(digest)
	if m == nil {
		return nil, ErrNotLoaded
	}
	export, ok := slotExports[slot]
	if !ok || !contains(m.slots, slot) || (m.abi == 2 && slot == "router") {
		return nil, ErrNoSlot
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var inst *instance
	select {
	case inst = <-m.pool:
	default:
		if inst, err = r.instantiate(ctx, m); err != nil {
			return nil, fmt.Errorf("%w: %v", ErrTrap, err)
		}
	}
	out, err = inst.document(m.abi, inst.mod.ExportedFunction(export), input, r.o.CallTimeout, r.o.MaxOutputBytes)
	if err != nil {
		// A failed instance may be in any state: never reuse it.
		inst.close()
		return nil, err
	}
	select {
	case m.pool <- inst:
	default:
		inst.close()
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

// instance is one instantiated module, used by one call at a time.
type instance struct {
	mod   api.Module
	mem   api.Memory
	input api.Function // pillar_alloc (v1) or pillar_input (v2)
	// inPtr and inCap locate the v2 input buffer the guest keeps.
	inPtr, inCap uint32
	stack        [2]uint64
	// ctx is the instance's own context: wazero watches it during every
	// call, and the watchdog cancels it when a call overruns. One context
	// per instance, not per call, keeps the call path free of allocation;
	// a cancelled instance is never reused.
	ctx      context.Context
	cancel   context.CancelFunc
	watchdog *time.Timer
	// router holds what a v2 router binding keeps per instance.
	router routerState
	// fuel is the counter of a metered instance (nil otherwise), set to
	// budget before every call.
	fuel   api.MutableGlobal
	budget uint64
	// stop, set by reap, makes the guest's next charge trap (fuel.Stop).
	stop api.MutableGlobal
	// call packs the number of metered calls begun (above 2 bits) with the
	// state of the latest (idle, running, reaping): one word, so reap can
	// never pair one call's number with the next call's state. ticks is
	// how many of reap's ticks the call may run through; watched and seen
	// are reap's own: the call it saw running and at how many ticks.
	call    atomic.Uint64
	ticks   atomic.Uint32
	watched uint64
	seen    uint32
	// stopped says reap set stop: the call path reads this flag rather
	// than the guest's global.
	stopped atomic.Bool
	r       *Runtime
	// calls counts the instance's calls for sampling their duration.
	calls uint32
}

// timedEvery: one call in timedEvery of each instance is timed for
// svc_plugin_call_duration_seconds (the instance's first included). The
// histogram is the distribution of a uniform sample of calls; its count is
// the sample's size, svc_plugin_calls_total the number of calls.
const timedEvery = 8

// timed counts a call and says whether its duration is sampled.
func (in *instance) timed() bool {
	in.calls++
	return in.calls%timedEvery == 1
}

// States of a metered instance's call (the low bits of instance.call).
const (
	idle uint64 = iota
	running
	reaping
	stateBits = 2
	stateMask = 1<<stateBits - 1
)

// reap stops metered calls that run longer than they may (a call
// timeout; an instance's start timeout for _initialize), counted in ticks
// of the call timeout: fuel bounds the instructions a call runs, not their time, and
// a unit costs far more than the budget assumes when every load misses
// the caches (BenchmarkFuelRate in package fuel: 60 times the tightest
// loop's on 64 MiB). A call seen running at more ticks than it may gets
// its stop flag set (not its counter zeroed: the guest's own update of the
// counter would overwrite that), so its next charge traps: it ends as a
// timeout within its time plus two ticks and one run between two reads of
// the flag (package fuel reads it at most a few thousand instructions
// apart). On the call path it costs a few atomic operations, where a
// watchdog timer per call would cost a timer reset and stop. The ticker
// runs only while a metered instance is registered (watch).
func (r *Runtime) reap() {
	defer close(r.reaped)
	for {
		select {
		case <-r.stopReap:
			return
		case <-r.ticks:
		}
		r.reapTicks.Add(1)
		r.liveMu.Lock()
		for in := range r.live {
			w := in.call.Load()
			if w&stateMask != running {
				in.watched, in.seen = 0, 0
				continue
			}
			if c := w >> stateBits; in.watched != c {
				in.watched, in.seen = c, 0
			}
			in.seen++
			// The swap fails if that call ended meanwhile: a later call is
			// never stopped for an earlier one's time.
			if in.seen > in.ticks.Load() && in.call.CompareAndSwap(w, w&^stateMask|reaping) {
				in.stop.Set(1)
				in.stopped.Store(true)
				in.call.Store(w)
			}
		}
		// Re-armed once the tick is handled, so a test that waits for the
		// arming sees its effect.
		if r.ticking {
			r.ticker.Reset(r.o.CallTimeout)
		}
		r.liveMu.Unlock()
	}
}

// watch adds a metered instance to what reap watches (or removes it),
// starting the ticker with the first and stopping it after the last:
// after Stop no tick is delivered (and reap re-arms only while ticking),
// so an idle runtime's reap sleeps.
func (r *Runtime) watch(in *instance, add bool) {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	if add {
		r.live[in] = struct{}{}
	} else {
		delete(r.live, in)
	}
	switch on := len(r.live) > 0; {
	case on && !r.ticking:
		r.ticker.Reset(r.o.CallTimeout)
	case !on && r.ticking:
		r.ticker.Stop()
	}
	r.ticking = len(r.live) > 0
}

// reaperTicking says whether reap's ticker runs (tests).
func (r *Runtime) reaperTicking() bool {
	r.liveMu.Lock()
	defer r.liveMu.Unlock()
	return r.ticking
}

func (r *Runtime) instantiate(ctx context.Context, m *module) (*instance, error) {
	// Start-up gets a longer budget than a call: the guest runtime boots.
	ictx, cancel := context.WithTimeout(ctx, r.startTimeout())
	defer cancel()
	cfg := wazero.NewModuleConfig().WithName("").WithStartFunctions("_initialize")
	if m.metered {
		// Its _initialize runs below, where reap watches it (package fuel
		// refuses a start section, which would run here unwatched).
		cfg = cfg.WithStartFunctions()
	}
	mod, err := m.rt.InstantiateModule(ictx, m.compiled, cfg)
	if err != nil {
		return nil, err
	}
	name := ExportAlloc
	if m.abi == 2 {
		name = ExportInput
	}
	inst := &instance{mod: mod, mem: mod.Memory(), input: mod.ExportedFunction(name)}
	if m.metered {
		g, ok := mod.ExportedGlobal(fuel.Export).(api.MutableGlobal)
		stop, ok2 := mod.ExportedGlobal(fuel.Stop).(api.MutableGlobal)
		if !ok || !ok2 {
			mod.Close(context.Background())
			return nil, fmt.Errorf("%w: metered without a fuel counter", ErrInvalidModule)
		}
		inst.fuel, inst.stop, inst.budget = g, stop, fuelPerCall(r.o.CallTimeout)
	}
	if inst.mem == nil {
		mod.Close(context.Background())
		return nil, fmt.Errorf("%w: the module has no memory", ErrInvalidModule)
	}
	inst.ctx, inst.cancel = context.WithCancel(context.Background())
	inst.watchdog = time.AfterFunc(time.Hour, inst.cancel)
	inst.watchdog.Stop()
	if m.metered {
		inst.r = r
		r.watch(inst, true)
		if init := mod.ExportedFunction("_initialize"); init != nil {
			if len(init.Definition().ParamTypes())+len(init.Definition().ResultTypes()) != 0 {
				inst.close()
				return nil, fmt.Errorf("%w: _initialize must take and return nothing", ErrInvalidModule)
			}
			inst.budget = fuelPerCall(r.startTimeout())
			err := inst.run(init, r.startTimeout())
			inst.budget = fuelPerCall(r.o.CallTimeout)
			if err != nil {
				inst.close()
				if errors.Is(err, ErrTimeout) {
					return nil, fmt.Errorf("%w: its start ran out of fuel", ErrTimeout)
				}
				return nil, err
			}
		}
	}
	return inst, nil
}

func (in *instance) close() {
	if in.r != nil {
		in.r.watch(in, false)
	}
	in.watchdog.Stop()
	in.cancel()
	in.mod.Close(context.Background())
}

// run calls fn with in.stack as parameters and results, interrupting it
// after timeout. A call whose watchdog fired is a timeout even if it
// returned just then: the instance is being closed and must be discarded.
func (in *instance) run(fn api.Function, timeout time.Duration) error {
	if in.fuel != nil {
		// Metered: the fuel, not a watchdog, ends a call that runs too long,
		// and reap one whose units cost more than the budget assumes.
		// The budget and ticks are set before the call is marked running;
		// a call that ends while reap stops it waits for reap to finish,
		// then clears the stop flag, so the instance's next call starts
		// unstopped.
		in.fuel.Set(in.budget)
		ticks := uint32(1)
		if timeout != in.r.o.CallTimeout {
			ticks = uint32(max(timeout/in.r.o.CallTimeout, 1))
		}
		if in.ticks.Load() != ticks {
			in.ticks.Store(ticks)
		}
		// Only this goroutine moves the word out of idle.
		n := in.call.Load()>>stateBits + 1
		in.call.Store(n<<stateBits | running)
		// Background: the metered runtime has no termination checks, so
		// the context is only searched for wazero's options; the
		// instance's own would be searched a level deeper.
		err := fn.CallWithStack(context.Background(), in.stack[:])
		for !in.call.CompareAndSwap(n<<stateBits|running, n<<stateBits) { // to idle (zero)
			runtime.Gosched()
		}
		if in.stopped.Load() {
			in.stop.Set(0)
			in.stopped.Store(false)
		}
		if err != nil {
			if in.fuel.Get() == fuel.Spent {
				return ErrTimeout
			}
			return fmt.Errorf("%w: %v", ErrTrap, err)
		}
		return nil
	}
	in.watchdog.Reset(timeout)
	err := fn.CallWithStack(in.ctx, in.stack[:])
	if !in.watchdog.Stop() {
		return ErrTimeout
	}
	if err != nil {
		return fmt.Errorf("%w: %v", ErrTrap, err)
	}
	return nil
}

// buffer returns the v2 input buffer with room for n bytes, asking the
// guest for a larger one only when it is too small.
func (in *instance) buffer(n int, timeout time.Duration) ([]byte, error) {
	if uint32(n) > in.inCap || in.inPtr == 0 {
		in.stack[0] = uint64(n)
		if err := in.run(in.input, timeout); err != nil {
			return nil, err
		}
		in.inPtr, in.inCap = uint32(in.stack[0]), uint32(n)
	}
	b, ok := in.mem.Read(in.inPtr, uint32(n))
	if !ok {
		return nil, fmt.Errorf("%w: input buffer out of memory range", ErrGarbage)
	}
	return b, nil
}

// answer reads the guest's answer located by a packed pointer and length.
// The bytes are the guest's memory: valid until the next call.
func (in *instance) answer(res uint64, maxOut int) ([]byte, error) {
	ptr, n := uint32(res>>32), uint32(res)
	if int(n) > maxOut {
		return nil, fmt.Errorf("%w: answer of %d bytes", ErrGarbage, n)
	}
	b, ok := in.mem.Read(ptr, n)
	if !ok {
		return nil, fmt.Errorf("%w: answer out of memory range", ErrGarbage)
	}
	return b, nil
}

// document writes a JSON document into the guest, calls export and copies
// the answer out.
func (in *instance) document(abi int, export api.Function, input []byte, timeout time.Duration, maxOut int) ([]byte, error) {
	if abi == 1 {
		in.stack[0] = uint64(len(input))
		if err := in.run(in.input, timeout); err != nil {
			return nil, fmt.Errorf("alloc: %w", err)
		}
		if len(input) > 0 && !in.mem.Write(uint32(in.stack[0]), input) {
			return nil, fmt.Errorf("%w: alloc returned memory out of range", ErrGarbage)
		}
		in.stack[1] = uint64(len(input))
	} else {
		buf, err := in.buffer(len(input), timeout)
		if err != nil {
			return nil, err
		}
		copy(buf, input)
		in.stack[0] = uint64(len(input))
	}
	if err := in.run(export, timeout); err != nil {
		return nil, err
	}
	b, err := in.answer(in.stack[0], maxOut)
	if err != nil {
		return nil, err
	}
	return append([]byte(nil), b...), nil
}
