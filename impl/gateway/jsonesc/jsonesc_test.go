package jsonesc

import "testing"

func TestHex4(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]rune{"0041": 'A', "00e9": 'é', "00E9": 'é', "FFFF": 0xffff, "d83d": 0xd83d} {
		if r, ok := Hex4([]byte(`\u`+in), 2); !ok || r != want {
			t.Errorf("Hex4(%q) = %U, %v", in, r, ok)
		}
	}
	for _, in := range []string{"004", "00g1", "", "0x41"} {
		if _, ok := Hex4([]byte(`\u`+in), 2); ok {
			t.Errorf("Hex4(%q) accepted", in)
		}
	}
}

func TestSimple(t *testing.T) {
	t.Parallel()
	for in, want := range map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'} {
		if got, ok := Simple(in); !ok || got != want {
			t.Errorf("Simple(%q) = %q, %v", in, got, ok)
		}
	}
	for _, in := range []byte{'u', 'x', '0', 'N', '\'', ' '} {
		if _, ok := Simple(in); ok {
			t.Errorf("Simple(%q) accepted", in)
		}
	}
}
