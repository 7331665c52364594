package sqlstore

import (
	"cmp"
	"encoding/json"
	"math/rand/v2"
	"slices"
	"testing"
)

// sortRows moves every row to where a plain sort puts it, whatever the
// permutation's cycles (sizes 0 to 300, few and many ties).
func TestSortRows(t *testing.T) {
	type row struct {
		k, id int
		pad   [5]string
	}
	byKey := func(a, b *row) int { return cmp.Or(cmp.Compare(a.k, b.k), cmp.Compare(a.id, b.id)) }
	rng := rand.New(rand.NewPCG(1, 2))
	for n := 0; n <= 300; n += 1 + n/7 {
		for _, keys := range []int{1, 3, 1000} {
			rows := make([]row, n)
			for i := range rows {
				rows[i] = row{k: rng.IntN(keys), id: i}
				rows[i].pad[4] = string(rune('a' + i%26))
			}
			rng.Shuffle(n, func(i, j int) { rows[i], rows[j] = rows[j], rows[i] })
			want := slices.Clone(rows)
			slices.SortFunc(want, func(a, b row) int { return byKey(&a, &b) })
			sortRows(rows, byKey)
			if !slices.Equal(rows, want) {
				t.Fatalf("n=%d keys=%d: got %v, want %v", n, keys, rows, want)
			}
		}
	}
}

// plainStrings agrees with encoding/json wherever it answers, and leaves
// what it cannot tell to it.
func TestPlainStrings(t *testing.T) {
	for _, s := range []string{`[]`, `["*"]`, `["a","b-*"]`, `["claude-3-5-sonnet-*","x"]`, `[""]`, `["a\"b"]`, `["\u00e9"]`,
		`[ "a"]`, `["a",]`, `["a"`, `[1]`, `null`, `["a""b"]`, `["a",,"b"]`, "[\"\x01\"]", "[\"\xff\"]", `["é"]`, `[`, `]`, ``, `["a"]x`} {
		got, ok := plainStrings(s)
		var want []string
		err := json.Unmarshal([]byte(s), &want)
		if !ok {
			continue
		}
		if err != nil || !slices.Equal(got, want) || got == nil {
			t.Errorf("%q: plainStrings %q, encoding/json %q (%v)", s, got, want, err)
		}
	}
	for _, s := range []string{`[]`, `["*"]`, `["a","b-*"]`, `["é"]`} {
		if _, ok := plainStrings(s); !ok {
			t.Errorf("%q: not decoded", s)
		}
	}
}

// An arena's copies equal their values, stay non-nil when empty (as
// json.RawMessage("") is, so a full read equals a delta read), and cannot
// be appended into the next value; a value longer than a chunk is kept
// whole.
func TestArenaKeep(t *testing.T) {
	var a arena
	if v := a.keep(""); v == nil || len(v) != 0 {
		t.Fatalf("empty value kept as %#v", v)
	}
	first := a.keep(`{"a":1}`)
	second := a.keep(`[]`)
	_ = append(first, 'x')
	if string(first) != `{"a":1}` || string(second) != `[]` {
		t.Fatalf("kept %q and %q", first, second)
	}
	long := string(make([]byte, 3*arenaChunk))
	if v := a.keep(long); string(v) != long {
		t.Fatal("a value longer than a chunk was not kept whole")
	}
}

// A fresh arena keeping one short value (a get, a list or a delta scans
// each row with its own) holds a small chunk, not a full one: the row
// pins it for its life. Many values still share chunks that grow to
// arenaChunk.
func TestArenaStartsSmall(t *testing.T) {
	var one arena
	if v := one.keep(`{"rpm":10}`); cap(one.buf) > arenaFirst || string(v) != `{"rpm":10}` {
		t.Fatalf("one short value took a chunk of %d bytes", cap(one.buf))
	}
	var many arena
	for range 10_000 {
		many.keep(`{"rpm":10,"tpm":20000}`)
	}
	if cap(many.buf) != arenaChunk {
		t.Fatalf("chunks grew to %d bytes, want %d", cap(many.buf), arenaChunk)
	}
}
