package fuel

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// gen builds a valid module from fuzz bytes: functions of type () -> ()
// made of nested block, loop and if/else, branches of every kind to any
// enclosing label (conditions read two mutable globals, one of them a
// counter the code bumps, so many loops end), direct and indirect calls
// between the functions (recursion included) and memory.grow.
type gen struct {
	in    []byte
	nfunc int
	ops   int
}

func (g *gen) next() byte {
	if len(g.in) == 0 {
		return 0
	}
	b := g.in[0]
	g.in = g.in[1:]
	return b
}

func (g *gen) cond(out []byte) []byte {
	switch g.next() % 3 {
	case 0:
		return append(out, 0x41, g.next()%2) // i32.const 0|1
	case 1:
		return append(out, 0x23, 0) // global.get 0
	default: // global.get 1 < k
		return append(out, 0x23, 1, 0x41, g.next()%32, 0x49)
	}
}

// seq appends up to a few instructions inside labels enclosing labels.
func (g *gen) seq(out []byte, labels int) []byte {
	for n := int(g.next() % 6); n > 0 && g.ops < 300; n-- {
		g.ops++
		depth := func() byte { return g.next() % byte(labels+1) }
		switch g.next() % 13 {
		case 0:
			out = append(out, 0x01)
		case 1:
			out = append(g.seq(append(out, 0x02, 0x40), labels+1), 0x0b)
		case 2:
			out = append(g.seq(append(out, 0x03, 0x40), labels+1), 0x0b)
		case 3:
			out = append(g.cond(out), 0x04, 0x40)
			out = append(g.seq(out, labels+1), 0x05)
			out = append(g.seq(out, labels+1), 0x0b)
		case 4:
			out = append(out, 0x0c, depth())
		case 5:
			out = append(g.cond(out), 0x0d, depth())
		case 6:
			out = append(out, 0x23, 1, 0x0e, 3, depth(), depth(), depth(), depth())
		case 7:
			out = append(out, 0x10, g.next()%byte(g.nfunc))
		case 8:
			out = append(out, 0x41, g.next()%byte(g.nfunc), 0x11, 0, 0)
		case 9:
			out = append(out, 0x41, 1, 0x40, 0, 0x1a)
		case 10: // counter += 1
			out = append(out, 0x23, 1, 0x41, 1, 0x6a, 0x24, 1)
		case 11: // flag = !flag
			out = append(out, 0x23, 0, 0x45, 0x24, 0)
		case 12:
			out = append(out, 0x0f)
		}
	}
	return out
}

func vec(n int, items ...[]byte) []byte { return cat(append([][]byte{{byte(n)}}, items...)...) }

func sect(id byte, body []byte) []byte { return cat([]byte{id}, leb(nil, uint64(len(body))), body) }

func (g *gen) module() []byte {
	g.nfunc = 1 + int(g.next()%4)
	var funcs, exports, elems, bodies [][]byte
	for i := range g.nfunc {
		funcs = append(funcs, []byte{0})
		exports = append(exports, cat([]byte{2, 'f', '0' + byte(i), 0, byte(i)}))
		elems = append(elems, []byte{byte(i)})
		code := g.seq([]byte{0}, 0) // no locals
		code = append(code, 0x0b)
		bodies = append(bodies, cat(leb(nil, uint64(len(code))), code))
	}
	exports = append(exports, []byte{2, 'c', '0', 3, 0}, []byte{2, 'c', '1', 3, 1})
	return cat([]byte("\x00asm\x01\x00\x00\x00"),
		sect(1, vec(1, []byte{0x60, 0, 0})),
		sect(3, vec(g.nfunc, funcs...)),
		sect(4, vec(1, []byte{0x70, 1, byte(g.nfunc), byte(g.nfunc)})),
		sect(5, vec(1, []byte{1, 1, 4})),
		sect(6, vec(2, []byte{0x7f, 1, 0x41, 0, 0x0b}, []byte{0x7f, 1, 0x41, 0, 0x0b})),
		sect(7, vec(len(exports), exports...)),
		sect(9, vec(1, []byte{0, 0x41, 0, 0x0b}, vec(g.nfunc, elems...))),
		sect(10, vec(g.nfunc, bodies...)),
	)
}

// outcome is what a call did: its globals and memory size if it returned.
type outcome struct {
	returned bool
	state    string
}

// runOnce calls export of a fresh instance of wasm; ctx bounds the call
// only, not the compilation, which on a loaded machine can take most of a
// short deadline by itself and make a finite original look endless.
func runOnce(ctx context.Context, t *testing.T, wasm []byte, export string, fuel uint64) (outcome, api.Module, error) {
	rt := wazero.NewRuntimeWithConfig(context.Background(), wazero.NewRuntimeConfig().WithCloseOnContextDone(true).WithMemoryLimitPages(4))
	defer rt.Close(context.Background())
	mod, err := rt.Instantiate(context.Background(), wasm)
	if err != nil {
		t.Fatalf("does not start: %v", err)
	}
	if g, ok := mod.ExportedGlobal(Export).(api.MutableGlobal); ok {
		g.Set(fuel)
	}
	_, err = mod.ExportedFunction(export).Call(ctx)
	o := outcome{returned: err == nil, state: fmt.Sprint(mod.ExportedGlobal("c0").Get(), mod.ExportedGlobal("c1").Get(), mod.Memory().Size())}
	return o, mod, err
}

// FuzzMeteredBounded: a metered random module is valid, computes what the
// original computed when given plenty of fuel, and on little fuel either
// finishes or traps with the counter at Spent or for the original's reason
// — never runs on past the test's deadline.
func FuzzMeteredBounded(f *testing.F) {
	f.Add([]byte{0, 3, 2, 2, 5, 2, 0})
	f.Add([]byte{1, 4, 2, 3, 10, 5, 2, 9, 7, 2, 4, 0, 8, 1})
	f.Add([]byte{3, 5, 7, 1, 8, 2, 3, 2, 2, 10, 5, 2, 3, 20, 6, 1, 0, 2, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &gen{in: in}
		wasm := g.module()
		ctx := context.Background()
		if _, err := wazero.NewRuntime(ctx).CompileModule(ctx, wasm); err != nil {
			t.Fatalf("the generator made an invalid module: %v", err)
		}
		// Stop checks every few instructions, so that the generator's short
		// bodies have runs to split, in every kind of position.
		metered, err := meter(wasm, 1<<20, 1+len(in)%5)
		if err != nil {
			t.Fatal(err)
		}
		for i := range g.nfunc {
			name := fmt.Sprintf("f%d", i)
			short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			want, _, werr := runOnce(short, t, wasm, name, 0)
			timedOut := short.Err() != nil
			cancel()
			if !timedOut {
				long, cancel := context.WithTimeout(ctx, 30*time.Second)
				got, mod, err := runOnce(long, t, metered, name, 1<<40)
				if long.Err() != nil {
					t.Fatalf("%s: metered ran past the deadline on plenty of fuel", name)
				}
				if got.returned != want.returned || (got.returned && got.state != want.state) {
					t.Errorf("%s: metered %+v %v, original %+v %v", name, got, err, want, werr)
				}
				if !got.returned && mod.ExportedGlobal(Export).Get() == Spent {
					t.Errorf("%s: the original trapped (%v) but the metered one ran out of fuel", name, werr)
				}
				cancel()
			}
			long, cancel := context.WithTimeout(ctx, 30*time.Second)
			got, mod, err := runOnce(long, t, metered, name, 2000)
			if long.Err() != nil {
				t.Fatalf("%s: ran past the deadline on 2000 fuel", name)
			}
			left := mod.ExportedGlobal(Export).Get()
			if !got.returned && !errors.Is(err, context.DeadlineExceeded) && left != Spent && timedOut {
				t.Errorf("%s: an endless original trapped on little fuel without spending it: %v", name, err)
			}
			if got.returned && left > 2000 {
				t.Errorf("%s: finished with %d fuel left of 2000", name, left)
			}
			cancel()
		}
	})
}
