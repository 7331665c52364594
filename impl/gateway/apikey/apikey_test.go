package apikey

import "testing"

func TestNewKeys(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := 0; i < 100; i++ {
		k, display, h := New()
		if !WellFormed(k) || display != k[:12] || h != Hash(k) || seen[k] {
			t.Fatalf("bad key %q", k)
		}
		seen[k] = true
	}
	if WellFormed("sk-ant-whatever") || WellFormed(Prefix+"short") {
		t.Fatal("malformed key accepted")
	}
}
