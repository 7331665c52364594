package harness

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	. "github.com/onsi/ginkgo/v2"

	"github.com/pillarhq/pillar/conformance/harness/runner"
)

// One harness, two runners (CONTRIBUTING.md, "Runners"): a suite's specs
// start binaries through Runner, which is the process runner unless the
// suite offers its Mains (AllowInProcess) and the run asks for them.
var runnerFlag = flag.String("runner", "", "how suites that allow it run the binaries: process (default) or inprocess; also CONFORMANCE_RUNNER")

var (
	runnerOnce sync.Once
	chosen     runner.Runner
	mains      map[string]runner.MainFunc
)

// AllowInProcess lets this suite run the binaries in the table (see
// conformance/harness/mains) in-process when -runner=inprocess. Suites
// whose specs crash binaries (SIGKILL, failpoints that exit) do not call
// it. Call it from a package-level var, before any spec starts a binary.
func AllowInProcess(table map[string]runner.MainFunc) bool {
	mains = table
	return true
}

// Runner is the suite's runner, chosen once per test binary.
func Runner() runner.Runner {
	runnerOnce.Do(func() {
		kind := *runnerFlag
		if kind == "" {
			kind = os.Getenv("CONFORMANCE_RUNNER")
		}
		r, note, err := chooseRunner(kind, mains, binDirPath())
		if note != "" {
			fmt.Fprintln(GinkgoWriter, "harness:", note)
		}
		chosen = r
		if err != nil {
			Fail(err.Error())
		}
	})
	return chosen
}

// chooseRunner maps -runner's value to a runner for a suite that offers
// table (nil: processes only).
func chooseRunner(kind string, table map[string]runner.MainFunc, dir string) (runner.Runner, string, error) {
	proc := runner.Process{Dir: dir}
	switch kind {
	case "", "process":
		return proc, "", nil
	case "inprocess":
		if table == nil {
			return proc, "this suite runs real processes only (its specs crash binaries); -runner=inprocess ignored", nil
		}
		return runner.InProcess{Mains: table, Else: proc}, "", nil
	default:
		return proc, "", fmt.Errorf("-runner=%q: want process or inprocess", kind)
	}
}

func binDirPath() string {
	if *binDir != "" {
		return *binDir
	}
	return filepath.Join(ModuleRoot(), "bin")
}

// runnerFor is Runner, except that a proxy armed with a failpoint
// (PROXY_FAILPOINTS: it exits the process at that point) always runs as a
// process: in-process it would end the test binary.
func runnerFor(env map[string]string) runner.Runner {
	if env["PROXY_FAILPOINTS"] != "" {
		return runner.Process{Dir: binDirPath()}
	}
	return Runner()
}
