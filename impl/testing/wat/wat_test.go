package wat_test

import (
	"bytes"
	"testing"

	"github.com/pillarhq/pillar/impl/testing/wat"
)

func TestAssemble(t *testing.T) {
	b := wat.Assemble(t, `(module (func (export "f")))`)
	if !bytes.HasPrefix(b, []byte("\x00asm\x01\x00\x00\x00")) {
		t.Fatalf("not a module: %q", b)
	}
	if _, err := wat.File("/nonexistent.wat"); err == nil {
		t.Fatal("a missing file assembled")
	}
}
