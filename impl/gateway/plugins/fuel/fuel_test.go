package fuel

import (
	"context"
	"errors"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"

	"github.com/pillarhq/pillar/impl/testing/wat"
)

// assemble builds a module from WebAssembly text.
var assemble = wat.Assemble

// instantiate meters wat and starts it in a runtime without termination
// checks, as the plugin runtime does.
func instantiate(t *testing.T, wat string, initial uint64) (api.Module, api.MutableGlobal) {
	t.Helper()
	metered, err := Meter(assemble(t, wat), initial)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	t.Cleanup(func() { rt.Close(ctx) })
	mod, err := rt.Instantiate(ctx, metered)
	if err != nil {
		t.Fatal(err)
	}
	g, ok := mod.ExportedGlobal(Export).(api.MutableGlobal)
	if !ok {
		t.Fatal("no mutable fuel counter exported")
	}
	return mod, g
}

// call runs an export with fuel and returns its results and the fuel left.
func call(t *testing.T, mod api.Module, g api.MutableGlobal, fuel uint64, name string, args ...uint64) ([]uint64, uint64, error) {
	t.Helper()
	g.Set(fuel)
	res, err := mod.ExportedFunction(name).Call(context.Background(), args...)
	return res, g.Get(), err
}

// Loops that never end, direct and mutual recursion, and recursion through
// a table all run out of fuel and trap, leaving the counter at Spent.
func TestEndlessGuestsRunOutOfFuel(t *testing.T) {
	mod, g := instantiate(t, `(module
  (type $v (func))
  (table 1 funcref)
  (elem (i32.const 0) $indirect)
  (func (export "spin") (loop $l (br $l)))
  (func (export "spin_if") (loop $l (br_if $l (i32.const 1))))
  (func $self (export "self") (call $self))
  (func $ping (export "ping") (call $pong))
  (func $pong (call $ping))
  (func $indirect (export "indirect") (call_indirect (type $v) (i32.const 0)))
  (func (export "nested") (loop $a (loop $b (br $b)) (br $a))))`, 1000)
	for _, name := range []string{"spin", "spin_if", "self", "ping", "indirect", "nested"} {
		_, left, err := call(t, mod, g, 100000, name)
		if err == nil || left != Spent {
			t.Errorf("%s: %v, fuel left %d, want a trap and %d", name, err, left, Spent)
		}
	}
}

// A metered module computes what it computed before; its fuel pays for
// the work done, more for more iterations.
func TestMeteredModulesBehaveTheSame(t *testing.T) {
	wat := `(module
  (global $g (mut i32) (i32.const 7))
  (func $sum (export "sum") (param $n i32) (result i32) (local $s i32)
    (block $done
      (loop $l
        (br_if $done (i32.eqz (local.get $n)))
        (local.set $s (i32.add (local.get $s) (local.get $n)))
        (local.set $n (i32.sub (local.get $n) (i32.const 1)))
        (br $l)))
    (local.get $s))
  ;; multi-value blocks, a loop with parameters, if/else, br_table
  (func (export "shapes") (param $x i32) (result i32 i32)
    (i32.const 1) (i32.const 2)
    (loop (param i32 i32) (result i32 i32))
    (drop) (drop)
    (if (result i32 i32) (local.get $x)
      (then (block (result i32 i32) (i32.const 3) (i32.const 4) (br_table 0 0 (local.get $x))))
      (else (i32.const 5) (i32.const 6)))
    (i32.add)
    (global.set $g (i32.add (global.get $g) (i32.const 1)))
    (i32.add (global.get $g))
    (call $sum (local.get $x))))`
	plain := assemble(t, wat)
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	orig, err := rt.Instantiate(ctx, plain)
	if err != nil {
		t.Fatal(err)
	}
	mod, g := instantiate(t, wat, 0)
	for _, x := range []uint64{0, 1, 5, 100} {
		want, err1 := orig.ExportedFunction("shapes").Call(ctx, x)
		got, _, err2 := call(t, mod, g, 1<<30, "shapes", x)
		if err1 != nil || err2 != nil || len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
			t.Errorf("shapes(%d): %v %v, want %v %v", x, got, err2, want, err1)
		}
	}
	_, left10, _ := call(t, mod, g, 1<<30, "sum", 10)
	res, left1000, err := call(t, mod, g, 1<<30, "sum", 1000)
	if err != nil || res[0] != 500500 {
		t.Fatalf("sum(1000) = %v %v", res, err)
	}
	if spent10, spent1000 := 1<<30-left10, 1<<30-left1000; spent1000 < 1000 || spent1000 < 50*spent10 {
		t.Errorf("sum(10) cost %d, sum(1000) %d: fuel does not follow the iterations", spent10, spent1000)
	}
	if _, left, err := call(t, mod, g, 500, "sum", 1000); err == nil || left != Spent {
		t.Errorf("sum(1000) on 500 fuel: %v, left %d", err, left)
	}
}

// The counter starts at the initial value Meter is given.
func TestInitialFuel(t *testing.T) {
	_, g := instantiate(t, `(module (func (export "f")))`, 1234)
	if g.Get() != 1234 {
		t.Errorf("initial fuel %d", g.Get())
	}
}

// What cannot be metered soundly is refused, and garbage never panics.
func TestRefused(t *testing.T) {
	for name, wat := range map[string]string{
		"an import":   `(module (import "env" "f" (func)) (func (export "g") (call 0)))`,
		"memory.fill": `(module (memory 1) (func (export "f") (memory.fill (i32.const 0) (i32.const 0) (i32.const 65536))))`,
		"memory.copy": `(module (memory 1) (func (export "f") (memory.copy (i32.const 0) (i32.const 1) (i32.const 100))))`,
		"tail call":   `(module (func $f (export "f") (return_call $f)))`,
		"simd":        `(module (func (export "f") (drop (v128.const i64x2 0 0))))`,
	} {
		wasm := assemble(t, wat, "--enable-tail-call")
		if _, err := Meter(wasm, 1); !errors.Is(err, ErrNotMeterable) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for _, b := range [][]byte{nil, []byte("\x00asm"), []byte("\x00asm\x01\x00\x00\x00\x0a\xff\xff\xff\xff\x0f"),
		[]byte("\x00asm\x01\x00\x00\x00\x0a\x04\x01\x02\x00\x03")} {
		if _, err := Meter(b, 1); !errors.Is(err, ErrNotMeterable) {
			t.Errorf("%q: %v", b, err)
		}
	}
}

// Meter never panics, whatever it is given.
func FuzzMeter(f *testing.F) {
	f.Add([]byte("\x00asm\x01\x00\x00\x00"))
	f.Add([]byte("\x00asm\x01\x00\x00\x00\x01\x04\x01\x60\x00\x00\x03\x02\x01\x00\x0a\x07\x01\x05\x00\x03\x40\x0b\x0b"))
	f.Fuzz(func(t *testing.T, b []byte) { Meter(b, 1) })
}
