// Package impl_test guards the module's dependency direction (STYLE.md
// 11): the product never depends on the simulators or the conformance
// suites, and the simulators, which stand for systems outside the
// project, never depend on the product. The simulated variants of the
// binaries compose the two outside both (conformance/simnode).
package impl_test

import (
	"errors"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const module = "github.com/pillarhq/pillar/"

func TestDependencyDirection(t *testing.T) {
	for _, tc := range []struct{ from, forbidden string }{
		{"impl", "sim"},
		{"impl", "conformance"},
		{"sim", "impl"},
		{"sim", "conformance"},
	} {
		t.Run(tc.from+" without "+tc.forbidden, func(t *testing.T) {
			// -test: a package's tests count too.
			cmd := exec.Command(goTool(), "list", "-deps", "-test", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./"+tc.from+"/...")
			cmd.Dir = ".." // the module root
			out, err := cmd.Output()
			if err != nil {
				if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
					t.Fatalf("go list: %v\n%s", err, ee.Stderr)
				}
				t.Fatalf("go list: %v", err)
			}
			var bad []string
			for _, p := range strings.Fields(string(out)) {
				if strings.HasPrefix(p, module+tc.forbidden+"/") {
					bad = append(bad, p)
				}
			}
			if len(bad) > 0 {
				t.Fatalf("%s/... depends on %s/: %s", tc.from, tc.forbidden, strings.Join(bad, ", "))
			}
		})
	}
}

// goTool is the go command of the toolchain running the test.
func goTool() string {
	p := filepath.Join(runtime.GOROOT(), "bin", "go") //nolint:staticcheck // a test binary runs where it was built
	if _, err := exec.LookPath(p); err == nil {
		return p
	}
	return "go"
}
