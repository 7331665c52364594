package plugins

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

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

// A metered call its fuel does not stop in time (cache misses can make a
// unit cost 60 times what the budget assumes; here the budget is simply
// out of reach) is stopped by the reaper: its stop flag is set, the next
// charge traps, and the call is a timeout. The instance then works again.
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
