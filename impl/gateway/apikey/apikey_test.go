package apikey

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"strings"
	"testing"
)

// Issued keys have the documented shape, and the hash is the SHA-256 of the key.
func TestNewKeys(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for i := 0; i < 200; i++ {
		k, display, h := New()
		if len(k) != 49 || !strings.HasPrefix(k, "sk-px-") || display != k[:12] || seen[k] {
			t.Fatalf("bad key %q (display %q)", k, display)
		}
		if h != sha256.Sum256([]byte(k)) || h != Hash(k) {
			t.Fatalf("hash of %q is not its SHA-256", k)
		}
		raw, err := base64.RawURLEncoding.DecodeString(k[6:])
		if err != nil || len(raw) != 32 {
			t.Fatalf("key body %q: %v", k[6:], err)
		}
		if got, err := Parse(k); err != nil || got != h {
			t.Fatalf("Parse(%q) = %x, %v", k, got, err)
		}
		seen[k] = true
	}
}

func TestParseRefusesMalformed(t *testing.T) {
	t.Parallel()
	k, _, _ := New()
	for _, s := range []string{
		"", "sk-ant-api03-whatever", Prefix + "short", k + "A", k[:48],
		"sk-PX-" + k[6:],                       // prefix is case-sensitive
		Prefix + strings.Repeat("+", 43),       // standard, not URL-safe, alphabet
		Prefix + strings.Repeat("A", 42) + "B", // non-canonical trailing bits
		Prefix + strings.Repeat("A", 41) + "==",
	} {
		if WellFormed(s) {
			t.Errorf("WellFormed(%q) = true", s)
		}
		if _, err := Parse(s); !errors.Is(err, ErrMalformed) {
			t.Errorf("Parse(%q) err = %v", s, err)
		}
	}
}
