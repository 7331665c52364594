package fuel

import (
	"context"
	"testing"

	"github.com/tetratelabs/wazero"
)

// pad encodes v as an unsigned LEB128 of exactly n bytes (redundant
// continuation bytes are valid WebAssembly and move every offset after).
func pad(v uint64, n int) []byte {
	var out []byte
	for i := range n {
		b := byte(v & 0x7f)
		v >>= 7
		if i < n-1 {
			b |= 0x80
		}
		out = append(out, b)
	}
	return out
}

func cat(parts ...[]byte) []byte {
	var out []byte
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

// sec is a section with its size padded to five bytes.
func sec(id byte, body ...[]byte) []byte {
	b := cat(body...)
	return cat([]byte{id}, pad(uint64(len(b)), 5), b)
}

// A module written with padded LEB128 everywhere, custom sections between
// the others, a data count section and a type-indexed block type is
// metered as soundly as its minimal twin: its loop runs out of fuel and
// its straight code computes what it did.
func TestPaddedEncodings(t *testing.T) {
	custom := sec(0, []byte{4}, []byte("junk"), []byte{1, 2, 3})
	body := func(locals, code []byte) []byte {
		b := cat(locals, code)
		return cat(pad(uint64(len(b)), 4), b)
	}
	wasm := cat([]byte("\x00asm\x01\x00\x00\x00"),
		custom,
		sec(1, pad(2, 3), []byte{0x60, 0, 0}, []byte{0x60, 0, 1, 0x7f}), // () -> (), () -> i32
		custom,
		sec(3, pad(3, 2), pad(0, 3), pad(1, 3), pad(0, 2)),
		sec(5, pad(1, 4), []byte{0}, pad(1, 3)), // memory 1
		sec(6, pad(2, 5), // two globals, both mutable i32
			[]byte{0x7f, 1, 0x41}, pad(5, 3), []byte{0x0b},
			[]byte{0x7f, 1, 0x41}, pad(7, 4), []byte{0x0b}),
		custom,
		sec(7, pad(3, 3),
			pad(1, 2), []byte("f"), []byte{0}, pad(0, 3),
			pad(1, 1), []byte("g"), []byte{0}, pad(1, 4),
			pad(1, 1), []byte("h"), []byte{0}, pad(2, 5)),
		sec(12, pad(1, 3)), // data count
		custom,
		sec(10, pad(3, 4),
			// f: loop (type 0) br 0 end end, with padded depth and type index
			body(pad(0, 3), cat([]byte{0x03}, pad(0, 5)[:4], []byte{0x00}, []byte{0x0c}, pad(0, 4), []byte{0x0b, 0x0b})),
			// g: global.get 1 (padded) i32.const 1 i32.add, in a block of padded type 1
			body(cat(pad(1, 2), pad(2, 3), []byte{0x7f}), cat([]byte{0x02}, pad(1, 5)[:4], []byte{0x00},
				[]byte{0x23}, pad(1, 5), []byte{0x41}, pad(1, 2), []byte{0x6a}, []byte{0x0b}, []byte{0x0b})),
			// h: memory.size, drop, a store with padded alignment and offset
			body(pad(0, 1), cat([]byte{0x3f, 0x00, 0x1a, 0x41, 0, 0x41, 0x2a, 0x36}, pad(2, 5), pad(4, 5), []byte{0x0b}))),
		custom,
		sec(11, pad(1, 3), []byte{0}, []byte{0x41}, pad(0, 5), []byte{0x0b}, pad(1, 2), []byte("z")),
	)
	ctx := context.Background()
	rt := wazero.NewRuntime(ctx)
	defer rt.Close(ctx)
	orig, err := rt.Instantiate(ctx, wasm)
	if err != nil {
		t.Fatalf("the padded module is not valid: %v", err)
	}
	want, err := orig.ExportedFunction("g").Call(ctx)
	if err != nil || want[0] != 8 {
		t.Fatalf("g = %v %v", want, err)
	}
	metered, err := Meter(wasm, 1000)
	if err != nil {
		t.Fatal(err)
	}
	ctx, mod, g := guard(t, metered, 1000)
	spends(t, ctx, mod, g, 5000, "f")
	g.Set(1000)
	if got, err := mod.ExportedFunction("g").Call(ctx); err != nil || got[0] != want[0] {
		t.Errorf("metered g = %v %v, want %v", got, err, want)
	}
	if _, err := mod.ExportedFunction("h").Call(ctx); err != nil {
		t.Error(err)
	}
	if b, _ := mod.Memory().Read(4, 4); b[0] != 0x2a {
		t.Errorf("h stored %v", b)
	}
}
