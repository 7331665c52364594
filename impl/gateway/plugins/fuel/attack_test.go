package fuel

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// guard instantiates a metered module in a runtime WITH termination
// checks, so that a module the metering fails to bound makes the test fail
// at the deadline instead of hanging it.
func guard(t *testing.T, metered []byte, initial uint64) (context.Context, api.Module, api.MutableGlobal) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(1024))
	t.Cleanup(func() { rt.Close(context.Background()) })
	mod, err := rt.Instantiate(ctx, metered)
	if err != nil {
		t.Fatalf("the metered module does not start: %v", err)
	}
	g, ok := mod.ExportedGlobal(Export).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable fuel counter exported")
	}
	return ctx, mod, g
}

// spends calls export f with fuel and fails unless it traps with the
// counter at Spent (the deadline expiring means the fuel did not bound it).
func spends(t *testing.T, ctx context.Context, mod api.Module, g api.MutableGlobal, fuel uint64, name string) {
	t.Helper()
	g.Set(fuel)
	_, err := mod.ExportedFunction(name).Call(ctx)
	if ctx.Err() != nil {
		t.Fatalf("%s ran past the deadline on %d fuel", name, fuel)
	}
	if err == nil || g.Get() != Spent {
		t.Errorf("%s: %v, fuel left %d, want a trap and %d", name, err, g.Get(), Spent)
	}
}

// Endless guests built from every control construct the rewriter accepts:
// each either runs out of fuel or the module is refused.
func TestAttacksRunOutOfFuel(t *testing.T) {
	for name, src := range map[string]string{
		"br_table to a loop from nested blocks": `(func (export "f") (loop $l (block (block (block
			(br_table 0 1 $l 2 (i32.const 2)))))))`,
		"br_table default to a loop":     `(func (export "f") (loop $l (block (br_table 0 0 $l (i32.const 99)))))`,
		"br_if from an if inside a loop": `(func (export "f") (loop $l (if (i32.const 1) (then (br_if $l (i32.const 1))) (else nop))))`,
		"the else branch loops":          `(func (export "f") (loop $l (if (i32.const 0) (then nop) (else (br $l)))))`,
		"a loop inside else":             `(func (export "f") (if (i32.const 0) (then nop) (else (loop $l (br $l)))))`,
		"a loop with parameters (type index)": `(type $t (func (param i32 i64) (result i32 i64)))
			(func (export "f") (i32.const 1) (i64.const 2) (loop (type $t) (br 0)) (drop) (drop))`,
		"multi-value block feeding a loop": `(func (export "f") (block (result i32 i32) (i32.const 1) (i32.const 2))
			(loop (param i32 i32) (br 0)) )`,
		"the inner loop exits to the outer": `(func (export "f") (loop $a (block $b (loop $c (br $b))) (br $a)))`,
		"direct recursion":                  `(func $f (export "f") (call $f))`,
		"mutual recursion":                  `(func $a (export "f") (call $b)) (func $b (call $c)) (func $c (call $a))`,
		"recursion through a table set at run time": `(type $v (func)) (table 2 funcref) (elem (i32.const 1) $g)
			(func $g (table.set 0 (i32.const 0) (table.get 0 (i32.const 1))) (call_indirect (type $v) (i32.const 0)))
			(func (export "f") (call $g))`,
		"memory.grow up to the cap in a loop": `(memory 1) (func (export "f") (loop $l (drop (memory.grow (i32.const 1))) (br $l)))`,
		"memory.size and typed select": `(memory 1) (func (export "f") (loop $l
			(drop (select (result i32) (memory.size) (i32.const 1) (i32.const 0))) (br $l)))`,
		"reference and table instructions": `(table 1 funcref) (func (export "f") (loop $l
			(drop (ref.is_null (ref.null func))) (drop (table.size 0)) (br $l)))`,
		"saturating truncation and sign extension": `(func (export "f") (loop $l
			(drop (i32.extend8_s (i32.trunc_sat_f64_s (f64.const 1e300)))) (br $l)))`,
		"data.drop and elem.drop": `(memory 1) (data $d "x") (func $g) (elem $e func $g)
			(func (export "f") (loop $l (data.drop $d) (elem.drop $e) (br $l)))`,
		"loads and stores with offsets": `(memory 1) (func (export "f") (loop $l
			(i64.store offset=100 align=8 (i32.const 8) (i64.load8_u offset=65000 (i32.const 0))) (br $l)))`,
		"many globals (the counter's index takes two bytes)": strings.Repeat(`(global (mut i32) (i32.const 0))`, 200) +
			`(func (export "f") (loop $l (global.set 199 (i32.add (global.get 199) (i32.const 1))) (br $l)))`,
		"a large br_table": `(func (export "f") (loop $l (block (br_table` + strings.Repeat(" 0", 20000) + ` $l (i32.const 50000)))))`,
		"a loop exported and called through a table": `(type $v (func)) (table 1 funcref) (elem (i32.const 0) $spin)
			(func $spin (loop $l (br $l))) (func (export "f") (call_indirect (type $v) (i32.const 0)))`,
	} {
		t.Run(name, func(t *testing.T) {
			metered, err := Meter(assemble(t, "(module "+src+")"), 1000)
			if errors.Is(err, ErrNotMeterable) {
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			ctx, mod, g := guard(t, metered, 1000)
			spends(t, ctx, mod, g, 10000, "f")
		})
	}
}

// count runs f with fuel and returns how many times it bumped global 0
// (its loop iterations) before the fuel ran out.
func count(t *testing.T, src string, fuel uint64) uint64 {
	t.Helper()
	metered, err := Meter(assemble(t, src), 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, mod, g := guard(t, metered, 1000)
	spends(t, ctx, mod, g, fuel, "f")
	return mod.ExportedGlobal("n").Get()
}

// A loop iteration pays for the loop's whole body, nested blocks it
// skipped included: no iteration is cheaper than the body is long.
func TestALoopPaysItsWholeBody(t *testing.T) {
	const body = 1000
	src := `(module (global $n (export "n") (mut i64) (i64.const 0)) (func (export "f") (loop $l
		(global.set $n (i64.add (global.get $n) (i64.const 1)))
		(block $skip (br $skip) ` + strings.Repeat("(nop)", body) + `)
		(br $l))))`
	const fuel = 100000
	if n := count(t, src, fuel); n == 0 || n*body > fuel {
		t.Errorf("%d iterations of a %d-instruction loop on %d fuel", n, body, fuel)
	}
}

// A function with no loop pays its whole length on entry, before it runs.
func TestAStraightBodyPaysOnEntry(t *testing.T) {
	const body = 20000
	src := `(module (global $n (export "n") (mut i64) (i64.const 0)) (func (export "f")
		(global.set $n (i64.const 1)) ` + strings.Repeat("(nop)", body) + `))`
	metered, err := Meter(assemble(t, src), 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, mod, g := guard(t, metered, 1000)
	spends(t, ctx, mod, g, body-1, "f")
	if n := mod.ExportedGlobal("n").Get(); n != 0 {
		t.Error("the body ran before paying for itself")
	}
	g.Set(body + 100)
	if _, err := mod.ExportedFunction("f").Call(ctx); err != nil || g.Get() > 100 {
		t.Errorf("%v, %d left of %d", err, g.Get(), body+100)
	}
}

// Locals are zeroed on every call: a function pays for them on entry, and
// one declaring more than maxLocals is not metered.
func TestLocalsArePaidFor(t *testing.T) {
	const locals = 40000
	src := `(module (global $n (export "n") (mut i64) (i64.const 0)) (func $many (local ` + strings.Repeat("i64 ", locals) + `))
		(func (export "f") (loop $l (global.set $n (i64.add (global.get $n) (i64.const 1))) (call $many) (br $l))))`
	const calls = 10
	if n := count(t, src, calls*locals/localsPerUnit); n == 0 || n > calls {
		t.Errorf("%d calls zeroing %d locals each on the fuel of %d", n, locals, calls)
	}
	over := `(module (func (export "f") (local ` + strings.Repeat("i32 ", maxLocals+1) + `)))`
	if _, err := Meter(assemble(t, over), 1); !errors.Is(err, ErrNotMeterable) {
		t.Errorf("%d locals: %v", maxLocals+1, err)
	}
}

// The counter holds any initial value and the host's budget unchanged, the
// largest included; a charge of exactly what is left leaves zero.
func TestCounterLimits(t *testing.T) {
	src := `(module (func (export "f")))`
	for _, initial := range []uint64{0, 1, 1<<63 - 1, 1 << 63, Spent - 1} {
		metered, err := Meter(assemble(t, src), initial)
		if err != nil {
			t.Fatal(err)
		}
		_, _, g := guard(t, metered, initial)
		if g.Get() != initial {
			t.Errorf("initial %d reads %d", initial, g.Get())
		}
	}
	metered, _ := Meter(assemble(t, src), 0)
	ctx, mod, g := guard(t, metered, 0)
	g.Set(1) // the body is one end
	if _, err := mod.ExportedFunction("f").Call(ctx); err != nil || g.Get() != 0 {
		t.Errorf("exact charge: %v, %d left", err, g.Get())
	}
	spends(t, ctx, mod, g, 0, "f")
}

// What the rewriter cannot bound, or whose name collides with the counter,
// is refused.
func TestAttacksRefused(t *testing.T) {
	for name, src := range map[string]string{
		"exports a global named like the counter":                   `(global (export "pillar:fuel") (mut i64) (i64.const 0))`,
		"exports a function named like the counter":                 `(func (export "pillar:fuel") (loop $l (br $l)))`,
		"exports a global named like the stop flag":                 `(global (export "pillar:stop") (mut i32) (i32.const 0))`,
		"a start section (it runs inside instantiation, unwatched)": `(func $s (loop $l (br $l))) (start $s)`,
		"table.grow":  `(table 1 funcref) (func (export "f") (drop (table.grow 0 (ref.null func) (i32.const 1000))))`,
		"table.fill":  `(table 1 funcref) (func (export "f") (table.fill 0 (i32.const 0) (ref.null func) (i32.const 1)))`,
		"table.copy":  `(table 1 funcref) (func (export "f") (table.copy (i32.const 0) (i32.const 0) (i32.const 1)))`,
		"memory.init": `(memory 1) (data $d "x") (func (export "f") (memory.init $d (i32.const 0) (i32.const 0) (i32.const 1)))`,
		// Their cost is their length, up to the whole memory: a few of them
		// would run milliseconds between two reads of the stop flag.
		"memory.copy":        `(memory 1) (func (export "f") (memory.copy (i32.const 0) (i32.const 1) (i32.const 1)))`,
		"memory.fill":        `(memory 1) (func (export "f") (memory.fill (i32.const 0) (i32.const 1) (i32.const 1)))`,
		"an imported global": `(import "env" "g" (global (mut i64))) (func (export "f"))`,
		"an imported table":  `(import "env" "t" (table 1 funcref)) (func (export "f"))`,
		"atomics":            `(memory 1 1 shared) (func (export "f") (drop (i32.atomic.load (i32.const 0))))`,
	} {
		wasm := assemble(t, "(module "+src+")", "--enable-threads")
		if _, err := Meter(wasm, 1); !errors.Is(err, ErrNotMeterable) {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// An instruction that leaves guest code for the host costs more than one
// unit, in proportion: memory.grow (a host call even when it fails) pays
// growCost, and ref.func (a host call that looks the function up, 300
// times a loop iteration's cost when measured) is refused.
func TestCostlyInstructions(t *testing.T) {
	src := `(module (memory 1) (global $n (export "n") (mut i64) (i64.const 0)) (func (export "f") (loop $l
		(global.set $n (i64.add (global.get $n) (i64.const 1)))
		(drop (memory.grow (i32.const 1)))
		(br $l))))`
	const fuel = 100000
	if n := count(t, src, fuel); n == 0 || n*growCost > fuel {
		t.Errorf("%d memory.grow on %d fuel, want at most %d", n, fuel, fuel/growCost)
	}
	wasm := assemble(t, `(module (func $g) (elem declare func $g) (func (export "f") (loop $l (drop (ref.func $g)) (br $l))))`)
	if _, err := Meter(wasm, 1); !errors.Is(err, ErrNotMeterable) {
		t.Errorf("ref.func: %v", err)
	}
}

// Vectors that claim 2^32-1 entries and end at once are refused at the
// first missing entry, not after four billion reads (the fuzzer found the
// local groups and br_table cases stalling a worker for seconds each).
func TestHugeCountsStopAtTheEnd(t *testing.T) {
	head := "\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00"
	for name, code := range map[string]string{
		"local groups": "\x01\x05\xff\xff\xff\xff\x0f",
		"br_table":     "\x01\x07\x00\x0e\xff\xff\xff\xff\x0f",
		"select types": "\x01\x07\x00\x1c\xff\xff\xff\xff\x0f",
		"functions":    "\xff\xff\xff\xff\x0f",
	} {
		b := []byte(head + "\x0a" + string(leb(nil, uint64(len(code)))) + code)
		start := time.Now()
		if _, err := Meter(b, 1); !errors.Is(err, ErrNotMeterable) {
			t.Errorf("%s: %v", name, err)
		}
		t.Logf("%s: %s", name, time.Since(start))
	}
}

// rewriteAlloc is what Meter allocates for a module of one function whose
// body is body.
func rewriteAlloc(t *testing.T, body []byte) (uint64, []byte, error) {
	t.Helper()
	code := cat([]byte{0}, body, []byte{opEnd})
	wasm := cat([]byte("\x00asm\x01\x00\x00\x00"), sect(1, vec(1, []byte{0x60, 0, 0})), sect(3, vec(1, []byte{0})),
		sect(10, cat([]byte{1}, leb(nil, uint64(len(code))), code)))
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	out, err := Meter(wasm, 1)
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc, out, err
}

// The rewrite's memory follows the module's size (an 8 MiB body of nops
// made Meter allocate 1.1 GiB, a module at the 32 MiB upload limit four
// times that), and a body made mostly of loops, which the charges would
// inflate tenfold, is refused.
func TestRewriteStaysSmall(t *testing.T) {
	const size = 4 << 20
	alloc, out, err := rewriteAlloc(t, bytes.Repeat([]byte{0x01}, size))
	if err != nil {
		t.Fatal(err)
	}
	if alloc > 4*size {
		t.Errorf("metering %d bytes of code allocated %d", size, alloc)
	}
	if len(out) > size+size/checkEvery*maxCheck+1024 { // a stop check every checkEvery instructions
		t.Errorf("a body with no loop grew from %d to %d bytes", size, len(out))
	}
	if _, _, err := rewriteAlloc(t, bytes.Repeat([]byte{0x03, 0x40, 0x0b}, size/3)); !errors.Is(err, ErrNotMeterable) {
		t.Errorf("a body of loops: %v", err)
	}
}

// The host stops a running call by setting Stop, which the guest only
// reads: the next charge traps with the counter at Spent. (Zeroing the
// counter instead is lost to the guest's own read-modify-write of it: a
// loop given 2^62 fuel ran on.)
func TestStopEndsARunningCall(t *testing.T) {
	metered, err := Meter(assemble(t, `(module (func (export "f") (loop $l (br $l))))`), 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, mod, g := guard(t, metered, 0)
	stop, ok := mod.ExportedGlobal(Stop).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable stop flag exported")
	}
	g.Set(1 << 62)
	done := make(chan error, 1)
	go func() { _, err := mod.ExportedFunction("f").Call(ctx); done <- err }()
	for g.Get() == 1<<62 { // until the loop runs
		runtime.Gosched()
	}
	stop.Set(1)
	if err := <-done; err == nil || ctx.Err() != nil || g.Get() != Spent {
		t.Errorf("%v (deadline: %v), counter %d", err, ctx.Err(), g.Get())
	}
}

// straight is a function f(p) of n dependent i32.loads, each reading the
// next address (chase writes them), with no loop or call.
func straight(n int) string {
	return `(module (memory (export "memory") 1024) (func (export "f") (param i32) (result i32) local.get 0
` + strings.Repeat("i32.load\n", n) + `))`
}

// A straight body pays on entry, but the host's stop still ends it
// partway: the checks spread through it read the flag again (wazero's
// compiler would otherwise reuse the value the entry charge loaded). With
// plenty of fuel and no stop it computes what the original computes.
func TestStopEndsAStraightBody(t *testing.T) {
	const loads = 100_000
	wasm := assemble(t, straight(loads))
	metered, err := Meter(wasm, 0)
	if err != nil {
		t.Fatal(err)
	}
	ctx, mod, g := guard(t, metered, 0)
	chase(mod.Memory(), 1024)
	mem, _ := mod.Memory().Read(0, 1024*65536)
	stop := mod.ExportedGlobal(Stop).(api.MutableGlobal)
	f := mod.ExportedFunction("f")

	g.Set(1 << 62)
	res, err := f.Call(ctx, 0)
	x := uint32(0) // the original's result, followed here
	for range loads {
		x = binary.LittleEndian.Uint32(mem[x:])
	}
	if err != nil || uint32(res[0]) != x {
		t.Fatalf("unstopped: %v, ended at %d, the cycle at %d", err, res, x)
	}

	// The body runs for 20 ms or more; a stop set once it has paid
	// (the counter moved) is late only if this goroutine was descheduled
	// for that long, which a few attempts rule out.
	for attempt := 0; ; attempt++ {
		stop.Set(0)
		g.Set(1 << 62)
		var finished atomic.Bool
		done := make(chan error, 1)
		go func() { _, err := f.Call(ctx, 0); finished.Store(true); done <- err }()
		for g.Get() == 1<<62 {
			runtime.Gosched()
		}
		stop.Set(1)
		late := finished.Load()
		err := <-done
		if !late || attempt == 4 {
			if err == nil || ctx.Err() != nil || g.Get() != Spent {
				t.Errorf("stopped: %v (deadline: %v), counter %d, late %v", err, ctx.Err(), g.Get(), late)
			}
			return
		}
	}
}
