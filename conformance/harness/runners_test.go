package harness

import (
	"context"
	"io"
	"testing"

	"github.com/pillarhq/pillar/conformance/harness/runner"
)

func TestChooseRunner(t *testing.T) {
	table := map[string]runner.MainFunc{"proxy": func(context.Context, []string, func(string) string, io.Writer) error { return nil }}
	for _, c := range []struct {
		kind     string
		table    map[string]runner.MainFunc
		inProc   bool
		note, ok bool
	}{
		{kind: "", table: table, ok: true},
		{kind: "process", table: table, ok: true},
		{kind: "inprocess", table: table, inProc: true, ok: true},
		{kind: "inprocess", table: nil, note: true, ok: true}, // a crash suite ignores it
		{kind: "in-process", table: table},
	} {
		r, note, err := chooseRunner(c.kind, c.table, "/bin-dir")
		_, inProc := r.(runner.InProcess)
		if inProc != c.inProc || (note != "") != c.note || (err == nil) != c.ok {
			t.Errorf("%q (table %v): %T, note %q, err %v", c.kind, c.table != nil, r, note, err)
		}
		if p, ok := r.(runner.Process); ok && p.Dir != "/bin-dir" {
			t.Errorf("%q: process runner in %q", c.kind, p.Dir)
		}
	}
}

// A proxy armed with a failpoint exits its process: never in-process.
func TestFailpointsNeedAProcess(t *testing.T) {
	mains = map[string]runner.MainFunc{}
	*runnerFlag = "inprocess"
	t.Cleanup(func() { mains, *runnerFlag = nil, "" })
	if _, ok := runnerFor(map[string]string{"PROXY_FAILPOINTS": "after_dispatch"}).(runner.Process); !ok {
		t.Error("a failpoint ran in-process")
	}
	if _, ok := runnerFor(nil).(runner.InProcess); !ok {
		t.Error("without a failpoint the suite's in-process runner was not used")
	}
}
