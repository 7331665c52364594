// Package wat assembles WebAssembly text for tests with wat2wasm (Debian's
// wabt, which scripts/setup.sh installs): the plugin fixtures written in
// text and the small modules tests make up.
package wat

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// File assembles the text module at path.
func File(path string, flags ...string) ([]byte, error) {
	dir, err := os.MkdirTemp("", "wat")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	out := filepath.Join(dir, "m.wasm")
	if b, err := exec.Command("wat2wasm", append(flags, "-o", out, path)...).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("wat2wasm %s (Debian's wabt; scripts/setup.sh installs it): %v\n%s", path, err, b)
	}
	return os.ReadFile(out)
}

// Assemble assembles src or fails the test.
func Assemble(tb testing.TB, src string, flags ...string) []byte {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "m.wat")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		tb.Fatal(err)
	}
	wasm, err := File(path, flags...)
	if err != nil {
		tb.Fatal(err)
	}
	return wasm
}
