package main

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/conformance/harness/runner"
)

var binDir = flag.String("bin-dir", "", "directory holding the built binaries (default: <module root>/bin)")

// bins is the directory of bin/sim and bin/proxy; the test fails (not
// skips) without them, as the conformance suites do.
func bins(t *testing.T) string {
	dir := *binDir
	if dir == "" {
		dir = filepath.Join("..", "..", "bin")
	}
	for _, b := range []string{"sim", "proxy"} {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			t.Fatalf("%v: run make build, or pass -bin-dir", err)
		}
	}
	return dir
}

// make demo end to end: every step is shown, the answers are the
// simulator's through the proxy, the key is never shown whole, and
// without KEEP nothing is left behind.
func TestDemo(t *testing.T) {
	var out, log bytes.Buffer
	d := &demo{runner: runner.Process{Dir: bins(t)}, out: &out, log: &log}
	err := d.run(context.Background())
	d.cleanup()
	if err != nil {
		t.Fatalf("%v\n%s\n%s", err, log.String(), out.String())
	}
	for _, want := range []string{
		`"kind":"vendor_api_key"`, `"name":"demo-app"`, "key: sk-px-",
		`"text":"Hello from the demo"`, "event: message_stop", `"type":"permission_error"`,
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %s:\n%s", want, out.String())
		}
	}
	for _, want := range []string{"starting the provider sim", "starting the proxy", "everything was on loopback and is being stopped"} {
		if !strings.Contains(log.String(), want) {
			t.Errorf("steps lack %q:\n%s", want, log.String())
		}
	}
	// The key shows once, cut to its first 12 characters.
	if n := strings.Count(out.String(), "sk-px-"); n != 1 || !regexp.MustCompile(`key: sk-px-\S{6}… \(hidden\)\n`).MatchString(out.String()) {
		t.Errorf("the key shows %d times, or not cut:\n%s", n, out.String())
	}
	for _, p := range d.procs {
		if !p.Exited() {
			t.Errorf("%s still running", p.Name)
		}
	}
	if _, err := os.Stat(d.tmp); !os.IsNotExist(err) {
		t.Errorf("data directory %s left behind: %v", d.tmp, err)
	}
}
