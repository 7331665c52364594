package plugins

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/wat"
)

// meteredInstance is an instance of module d, which Compile (err) must have
// accepted and metered; closed when t ends.
func meteredInstance(t *testing.T, r *Runtime, d string, err error) *instance {
	t.Helper()
	if err != nil || !r.Metered(d) {
		t.Fatalf("%v, metered %v", err, r.Metered(d))
	}
	inst, err := r.instantiate(context.Background(), r.module(d))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(inst.close)
	return inst
}

// reaperClock is the fake clock a runtime's reaper ticks on, with tick:
// the clock moves one call timeout and tick returns once reap has handled
// that tick and waits for the next. Call it only while a metered instance
// lives (reap re-arms only then).
func reaperClock(t *testing.T, timeout time.Duration) (*fakeclock.Clock, func()) {
	clk := fakeclock.New(time.Time{})
	return clk, func() {
		// What instantiating and closing instances armed is not a tick.
		for len(clk.Armed()) > 0 {
			<-clk.Armed()
		}
		clk.Advance(timeout)
		if d := <-clk.Armed(); d != timeout {
			t.Fatalf("reap re-armed for %v, want the call timeout %v", d, timeout)
		}
	}
}

// A metered call its fuel does not stop in time (cache misses can make a
// unit cost 60 times what the budget assumes; here the budget is simply
// out of reach) is stopped by the reaper: its stop flag is set, the next
// charge traps, and the call is a timeout. The instance then works again.
// The reaper ticks on the real clock here: compiled guest code is not
// preemptible, so a guest spinning until a fake clock is advanced would
// stall the next garbage collection's stop-the-world and the test with it
// (TestReaperIdlesWithoutMeteredInstances drives the reaper's timer on the
// fake clock).
func TestReaperStopsAnOverrunningMeteredCall(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	d, _, err := r.Compile(ctx, wat.Assemble(t, `(module (memory (export "memory") 1)
  (func (export "pillar_abi_v2"))
  (func (export "pillar_input") (param i32) (result i32) (i32.const 1024))
  (func (export "pillar_configure") (param i32) (result i64) (i64.const 0))
  (func (export "pillar_route") (param i32) (result i64)
    (if (local.get 0) (then (loop $l (br $l))))
    (i64.const 7)))`))
	inst := meteredInstance(t, r, d, err)
	inst.budget = 1 << 62
	fn := inst.mod.ExportedFunction(ExportRoute)
	done := make(chan error, 1)
	inst.stack[0] = 1
	go func() { done <- inst.run(fn, r.o.CallTimeout) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("%v, want a timeout", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("an overrunning metered call was not stopped")
	}
	inst.stack[0] = 0
	if err := inst.run(fn, r.o.CallTimeout); err != nil || inst.stack[0] != 7 {
		t.Errorf("the next call: %v, %d", err, inst.stack[0])
	}
}

// A metered module's _initialize runs after instantiation, through the
// same watched call path as every call: what it sets is there for the
// first call, and one that never ends fails the upload as a timeout.
func TestMeteredInitialize(t *testing.T) {
	r, _ := newRuntime(t, Options{CallTimeout: 20 * time.Millisecond})
	ctx := context.Background()
	module := func(init string) []byte {
		return wat.Assemble(t, `(module (memory (export "memory") 1) (global $g (mut i64) (i64.const 0))
  (func (export "_initialize") `+init+`)
  (func (export "pillar_abi_v2"))
  (func (export "pillar_input") (param i32) (result i32) (i32.const 1024))
  (func (export "pillar_configure") (param i32) (result i64) (i64.const 0))
  (func (export "pillar_route") (param i32) (result i64) (global.get $g)))`)
	}
	d, _, err := r.Compile(ctx, module(`(global.set $g (i64.const 9))`))
	inst := meteredInstance(t, r, d, err)
	if err := inst.run(inst.mod.ExportedFunction(ExportRoute), r.o.CallTimeout); err != nil || inst.stack[0] != 9 {
		t.Errorf("route after _initialize: %v, %d", err, inst.stack[0])
	}
	if _, _, err := r.Compile(ctx, module(`(loop $l (br $l))`)); !errors.Is(err, ErrInvalidModule) || !strings.Contains(fmt.Sprint(err), ErrTimeout.Error()) {
		t.Errorf("an endless _initialize: %v", err)
	}
}

// chase is a module whose route is one straight body of n dependent
// i32.loads, each reading the address of the next, with no loop or call:
// fuel pays for the body on entry, and only the stop checks package fuel
// spreads through it can end it early.
func chase(t *testing.T, n int) []byte {
	return wat.Assemble(t, `(module (memory (export "memory") 1024)
  (func (export "pillar_abi_v2"))
  (func (export "pillar_input") (param i32) (result i32) (i32.const 1024))
  (func (export "pillar_configure") (param i32) (result i64) (i64.const 0))
  (func (export "pillar_route") (param i32) (result i64)
    local.get 0
`+strings.Repeat("i32.load\n", n)+`    i64.extend_i32_u))`)
}

// cycle writes into mem one cycle through its 64-byte slots in a
// pseudo-random order (a full-period LCG), each slot holding the next
// one's address: every load of the chase misses the caches and the TLB.
func cycle(mem []byte) {
	slots := uint32(len(mem) / 64)
	x := uint32(0)
	for range slots {
		next := (1664525*x + 1013904223) & (slots - 1)
		binary.LittleEndian.PutUint32(mem[x*64:], next*64)
		x = next
	}
}

// A metered call that is one huge straight body of cache-missing loads
// (the worst the fuel alone leaves unchecked: it paid on entry) is stopped
// by the reaper close to its timeout: package fuel reads the stop flag
// every few thousand instructions, not only at entry and loop heads. The
// same body given time computes what the original module computes.
func TestReaperStopsAStraightBody(t *testing.T) {
	// Big enough to run far past the timeout unchecked, small enough to
	// compile in seconds (one function's compile grows faster than its
	// length: two million loads took minutes under the race detector).
	const loads = 300_000
	r, _ := newRuntime(t, Options{CallTimeout: 2 * time.Millisecond})
	ctx := context.Background()
	wasm := chase(t, loads)
	d, _, err := r.Compile(ctx, wasm)
	inst := meteredInstance(t, r, d, err)
	mem := make([]byte, inst.mem.Size())
	cycle(mem)
	if !inst.mem.Write(0, mem) {
		t.Fatal("memory write")
	}
	route := inst.mod.ExportedFunction(ExportRoute)
	// The body's fuel (one charge at entry) is well within the budget, so
	// only the stop flag ends the call early: without the checks in
	// straight-line code the call ran the whole body and succeeded. The
	// stop needs the reaper to run twice while the call does; on a machine
	// loaded enough that it never got a processor meanwhile, the attempt
	// says nothing and is made again. A call the reaper watched for more
	// than two ticks and that still ran to its end fails. Time is logged,
	// not asserted: a timeout and a tick or two, 2-6 ms here, against
	// 55-120 ms for the whole body.
	for attempt := 1; ; attempt++ {
		inst.stack[0] = 0
		ticks := r.reapTicks.Load()
		start := time.Now()
		err = inst.run(route, r.o.CallTimeout)
		took, ticked := time.Since(start), r.reapTicks.Load()-ticks
		t.Logf("attempt %d: %d loads, %v after %v and %d reaper ticks (timeout %v)", attempt, loads, err, took, ticked, r.o.CallTimeout)
		if errors.Is(err, ErrTimeout) {
			break
		}
		if err != nil || ticked > 3 || attempt == 5 {
			t.Fatalf("%v after %v and %d reaper ticks, want a timeout", err, took, ticked)
		}
	}

	// Given time (the start timeout, 20 ticks), the metered body follows
	// the cycle as the original does.
	inst.stack[0] = 0
	if err := inst.run(route, r.startTimeout()); err != nil {
		t.Fatalf("with time: %v", err)
	}
	x := uint32(0)
	for range loads {
		x = binary.LittleEndian.Uint32(mem[x:])
	}
	if inst.stack[0] != uint64(x) {
		t.Errorf("metered chase ended at %d, the cycle at %d", inst.stack[0], x)
	}
}

// The reaper's ticker runs only while a metered instance exists: a
// runtime without one never wakes it (no timer armed on its clock). It
// starts with the first instance, ticks while any lives, and stops after
// the last closes.
func TestReaperIdlesWithoutMeteredInstances(t *testing.T) {
	clk, tick := reaperClock(t, time.Millisecond)
	r, _ := newRuntime(t, Options{CallTimeout: time.Millisecond, Clock: clk})
	idle := func(when string) {
		t.Helper()
		if r.reaperTicking() || len(clk.Pending()) != 0 {
			t.Fatalf("%s: ticking %v, timers armed %v", when, r.reaperTicking(), clk.Pending())
		}
	}
	idle("no metered instance yet")
	d, _, err := r.Compile(context.Background(), wat.Assemble(t, `(module (memory (export "memory") 1)
  (func (export "pillar_abi_v2"))
  (func (export "pillar_input") (param i32) (result i32) (i32.const 1024))
  (func (export "pillar_configure") (param i32) (result i64) (i64.const 0))
  (func (export "pillar_route") (param i32) (result i64) (i64.const 7)))`))
	if err != nil || !r.Metered(d) {
		t.Fatalf("%v, metered %v", err, r.Metered(d))
	}
	start := func() *instance {
		inst, err := r.instantiate(context.Background(), r.module(d))
		if err != nil {
			t.Fatal(err)
		}
		return inst
	}
	for round := range 2 { // stopped, then started again
		a, b := start(), start()
		if !r.reaperTicking() {
			t.Fatalf("round %d: not ticking with metered instances", round)
		}
		before := r.reapTicks.Load()
		tick()
		tick()
		if got := r.reapTicks.Load() - before; got != 2 {
			t.Fatalf("round %d: reap handled %d of 2 ticks", round, got)
		}
		a.close()
		if !r.reaperTicking() {
			t.Fatalf("round %d: stopped with an instance left", round)
		}
		b.close()
		idle(fmt.Sprintf("round %d, every instance closed", round))
	}
}
