package fuel

import (
	"context"
	"encoding/binary"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// BenchmarkFuelRate reports the time one unit of fuel buys for the kinds of
// loop a hostile guest might pick, run as the plugin runtime runs them
// (no termination checks). ns/unit far above the tightest loop's means a
// construct pays too little for what it costs.
func BenchmarkFuelRate(b *testing.B) {
	params := strings.Repeat(" i64", 1000)
	for _, c := range []struct {
		name, src string
		pages     uint32
	}{
		{name: "tightest", src: `(func (export "f") (loop $l (br $l)))`},
		{name: "memory.grow", src: `(func (export "f") (loop $l (drop (memory.grow (i32.const 1))) (br $l)))`},
		{name: "table.set", src: `(table 2 funcref) (func (export "f") (loop $l (table.set 0 (i32.const 0) (table.get 0 (i32.const 1))) (br $l)))`},
		{name: "call_indirect", src: `(type $v (func)) (table 1 funcref) (elem (i32.const 0) $g) (func $g)
			(func (export "f") (loop $l (call_indirect (type $v) (i32.const 0)) (br $l)))`},
		{name: "recursion", src: `(func $r (param i32) (if (local.get 0) (then (call $r (i32.sub (local.get 0) (i32.const 1))))))
			(func (export "f") (loop $l (call $r (i32.const 10000)) (br $l)))`},
		{name: "loop_1000_params", src: `(type $t (func (param` + params + `) (result` + params + `)))
			(func (export "f") ` + strings.Repeat("(i64.const 0)", 1000) + ` (loop (type $t) (br 0)) ` + strings.Repeat("(drop)", 1000) + `)`},
		{"pointer_chase_1MiB", chaser, 16},
		{"pointer_chase_4MiB", chaser, 64},
		{"pointer_chase_16MiB", chaser, 256},
		{"pointer_chase_64MiB", chaser, 1024},
	} {
		b.Run(c.name, func(b *testing.B) {
			metered, err := Meter(assemble(b, `(module (memory 1024) `+c.src+`)`), 0)
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithMemoryLimitPages(2048))
			defer rt.Close(ctx)
			mod, err := rt.Instantiate(ctx, metered)
			if err != nil {
				b.Fatal(err)
			}
			chase(mod.Memory(), c.pages)
			g := mod.ExportedGlobal(Export).(api.MutableGlobal)
			f := mod.ExportedFunction("f")
			const budget = 1 << 22
			b.ResetTimer()
			for range b.N {
				g.Set(budget)
				if _, err := f.Call(ctx); err == nil || g.Get() != Spent {
					b.Fatalf("%v, %d left", err, g.Get())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/budget, "ns/unit")
		})
	}
}

// chaser follows the pointers chase wrote: every load waits for the last.
const chaser = `(func (export "f") (local $p i32) (loop $l (local.set $p (i32.load (local.get $p))) (br $l)))`

// chase writes a random cycle through every 64-byte line of the first
// pages of mem: once they outgrow the caches, every load misses.
func chase(mem api.Memory, pages uint32) {
	if pages == 0 {
		return
	}
	lines := pages * 65536 / 64
	order := rand.New(rand.NewPCG(1, 2)).Perm(int(lines))
	buf, _ := mem.Read(0, pages*65536)
	prev := uint32(0)
	for _, l := range order {
		binary.LittleEndian.PutUint32(buf[prev:], uint32(l)*64)
		prev = uint32(l) * 64
	}
}
