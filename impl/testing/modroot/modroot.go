// Package modroot finds the repository from a test's working directory.
// Tests and the helpers they run are built with -trimpath (make test sets
// it), so runtime.Caller has no source path to start from.
package modroot

import (
	"os"
	"path/filepath"
)

// Dir is the nearest directory holding go.mod at or above the working
// directory (a test's package directory, or the repository for `go run`);
// the working directory itself when there is none.
func Dir() string {
	dir, _ := os.Getwd()
	for d := dir; d != "/"; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
	}
	return dir
}
