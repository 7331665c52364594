package bench_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

func TestPercentileIsNearestRank(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	for p, want := range map[float64]time.Duration{.5: 50 * time.Millisecond, .99: 99 * time.Millisecond, 1: 100 * time.Millisecond, .001: time.Millisecond} {
		if got := bench.Percentile(ds, p); got != want {
			t.Errorf("p%v = %v, want %v", p*100, got, want)
		}
	}
	if ds[0] != 100*time.Millisecond {
		t.Error("Percentile sorted its input in place")
	}
	if got := bench.Percentile(nil, .5); got != 0 {
		t.Errorf("empty: %v", got)
	}
}

func TestGoalsAreInclusiveBounds(t *testing.T) {
	t.Parallel()
	cases := []struct {
		g     bench.Goal
		ratio float64
		met   bool
	}{
		{bench.LatencyGoal, 0.5, true},
		{bench.LatencyGoal, 1.2, true},
		{bench.LatencyGoal, 1.21, false},
		{bench.ThroughputGoal, 0.9, true},
		{bench.ThroughputGoal, 0.89, false},
		{bench.ThroughputGoal, 3, true},
		{bench.ThroughputGoal, math.Inf(1), false}, // a baseline measured as zero is an error, not a pass
		{bench.LatencyGoal, math.NaN(), false},
	}
	for _, c := range cases {
		if got := c.g.Met(c.ratio); got != c.met {
			t.Errorf("%v met by %v = %v, want %v", c.g, c.ratio, got, c.met)
		}
	}
}

func sampleReport() bench.Report {
	return bench.Report{
		Rows: []bench.Row{
			{Metric: "c=1 latency p50", Unit: "µs", Values: []float64{440, 400, 420}, Goal: bench.LatencyGoal},
			{Metric: "throughput, 32 clients", Unit: "req/s", Values: []float64{4000, 5000, 4500}, Goal: bench.ThroughputGoal},
		},
		Env: bench.Env{Date: time.Date(2026, 11, 22, 13, 0, 0, 0, time.UTC), Commit: "abc1234", GoVersion: "go1.26.8", CPUs: 2, GOMAXPROCS: 2, CPUModel: "test cpu"},
	}
}

func TestReportTableShowsValuesRatiosVerdictsAndNoise(t *testing.T) {
	t.Parallel()
	rep := sampleReport()
	table := rep.Table()
	for _, want := range []string{
		"| metric | gateway | bare | gateway ÷ bare | target | noise floor: bare′ ÷ bare |",
		"| c=1 latency p50 | 440 µs | 400 µs | 1.10x met | ≤ 1.2x | 1.05x |",
		"| throughput, 32 clients | 4000 req/s | 5000 req/s | 0.80x **MISSED** | ≥ 0.9x | 0.90x |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q:\n%s", want, table)
		}
	}
	missed := rep.Missed()
	if len(missed) != 1 || missed[0] != "throughput, 32 clients: gateway ÷ bare = 0.80x, target ≥ 0.9x (noise floor on this run: 0.90x)" {
		t.Errorf("missed %q", missed)
	}

	// Without a control there is no noise column.
	for i := range rep.Rows {
		rep.Rows[i].Values = rep.Rows[i].Values[:2]
	}
	if table := rep.Table(); strings.Contains(table, "noise") || !strings.Contains(table, "| c=1 latency p50 | 440 µs | 400 µs | 1.10x met | ≤ 1.2x |\n") {
		t.Errorf("table without a control:\n%s", table)
	}
}

func TestReportSaysLoudlyWhatWasMissed(t *testing.T) {
	t.Parallel()
	rep := sampleReport()
	s := rep.Summary()
	if !strings.Contains(s, "1 target(s) MISSED") || !strings.Contains(s, "!!!   throughput, 32 clients: gateway ÷ bare = 0.80x") {
		t.Errorf("summary:\n%s", s)
	}
	md := rep.Markdown()
	for _, want := range []string{
		"on 2026-11-22 13:00 UTC: commit abc1234, go1.26.8, 2 cores (GOMAXPROCS 2), test cpu.",
		"Missed on this run:\n\n- throughput, 32 clients: gateway ÷ bare = 0.80x",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q:\n%s", want, md)
		}
	}

	rep.Rows[1].Values[bench.Gateway] = 4500
	if s := rep.Summary(); !strings.Contains(s, "all targets met") || strings.Contains(s, "MISSED") {
		t.Errorf("summary with every target met:\n%s", s)
	}
	if md := rep.Markdown(); !strings.Contains(md, "Every target was met on this run.") {
		t.Errorf("markdown with every target met:\n%s", md)
	}
}
