package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Percentile returns the p-quantile (0 < p ≤ 1) of ds by nearest rank: the
// smallest sample with at least p of all samples at or below it.
func Percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(math.Ceil(p*float64(len(s)))) - 1
	return s[max(0, min(i, len(s)-1))]
}

// Micros expresses d in microseconds, the unit of the latency rows.
func Micros(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// Goal bounds the ratio gateway ÷ baseline: at most Max when lower is
// better (latency), at least Min when higher is better (throughput).
type Goal struct {
	Max, Min float64
}

// Met reports whether ratio satisfies the goal.
func (g Goal) Met(ratio float64) bool {
	if math.IsNaN(ratio) || math.IsInf(ratio, 0) {
		return false
	}
	if g.Max > 0 && ratio > g.Max {
		return false
	}
	return ratio >= g.Min
}

func (g Goal) String() string {
	if g.Max > 0 {
		return fmt.Sprintf("≤ %.2gx", g.Max)
	}
	return fmt.Sprintf("≥ %.2gx", g.Min)
}

// The targets from the issue: the gateway may add at most 20% latency and
// lose at most 10% throughput against a bare reverse proxy.
var (
	LatencyGoal    = Goal{Max: 1.2}
	ThroughputGoal = Goal{Min: 0.9}
)

// The paths measured, in the order of Row.Values.
const (
	Gateway = iota // bin/proxy
	Bare           // the baseline reverse proxy
	Control        // a second, identical baseline process: the noise floor
)

// Row is one metric measured on every path.
type Row struct {
	Metric string
	Unit   string    // "µs" or "req/s"
	Values []float64 // indexed by Gateway, Bare and, when measured, Control
	Goal   Goal
}

// Ratio is gateway ÷ bare, the figure the goal applies to.
func (r Row) Ratio() float64 { return r.Values[Gateway] / r.Values[Bare] }

// Met reports whether the gateway meets the row's goal.
func (r Row) Met() bool { return r.Goal.Met(r.Ratio()) }

// Noise is control ÷ bare: two identical processes compared the same way,
// so it shows how far a ratio moves on this machine with no real difference.
// It is NaN when no control was measured.
func (r Row) Noise() float64 {
	if len(r.Values) <= Control {
		return math.NaN()
	}
	return r.Values[Control] / r.Values[Bare]
}

// Env describes where and what was measured.
type Env struct {
	Date       time.Time
	Commit     string
	GoVersion  string
	CPUs       int
	GOMAXPROCS int
	CPUModel   string
}

// Report is the outcome of one load run.
type Report struct {
	Rows []Row
	Env  Env
}

// Missed lists every goal the gateway missed, one line each.
func (rep Report) Missed() []string {
	var out []string
	for _, r := range rep.Rows {
		if !r.Met() {
			line := fmt.Sprintf("%s: gateway ÷ bare = %.2fx, target %s", r.Metric, r.Ratio(), r.Goal)
			if n := r.Noise(); !math.IsNaN(n) {
				line += fmt.Sprintf(" (noise floor on this run: %.2fx)", n)
			}
			out = append(out, line)
		}
	}
	return out
}

func (rep Report) hasControl() bool {
	for _, r := range rep.Rows {
		if !math.IsNaN(r.Noise()) {
			return true
		}
	}
	return false
}

// writeMissed lists the targets a run missed, or says allMet.
func writeMissed(b *strings.Builder, missed []string, allMet string) {
	if len(missed) == 0 {
		b.WriteString("\n" + allMet + "\n")
		return
	}
	b.WriteString("\nMissed on this run:\n\n")
	for _, s := range missed {
		b.WriteString("- " + s + "\n")
	}
}

// tableHead writes the header of a gateway-against-bare table, with the
// noise-floor column when a control was measured.
func tableHead(b *strings.Builder, metric string, ctl bool) {
	pathsHead(b, metric, "gateway", "bare", ctl)
}

// pathsHead writes the header of a table comparing path a against the
// baseline path base, with the noise-floor column (base′ ÷ base) when a
// control was measured.
func pathsHead(b *strings.Builder, metric, a, base string, ctl bool) {
	b.WriteString("| " + metric + " | " + a + " | " + base + " | " + a + " ÷ " + base + " | target |")
	if ctl {
		b.WriteString(" noise floor: " + base + "′ ÷ " + base + " |")
	}
	b.WriteString("\n|---|---:|---:|---|---|")
	if ctl {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
}

// Table renders the figures as a markdown table: absolute values for the
// gateway and the baseline, their ratio with whether the goal was met and,
// when a control was measured, the noise floor.
func (rep Report) Table() string {
	var b strings.Builder
	ctl := rep.hasControl()
	tableHead(&b, "metric", ctl)
	for _, r := range rep.Rows {
		verdict := "met"
		if !r.Met() {
			verdict = "**MISSED**"
		}
		fmt.Fprintf(&b, "| %s | %.0f %s | %.0f %s | %.2fx %s | %s |", r.Metric,
			r.Values[Gateway], r.Unit, r.Values[Bare], r.Unit, r.Ratio(), verdict, r.Goal)
		if ctl {
			fmt.Fprintf(&b, " %.2fx |", r.Noise())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Markdown is the overhead section of docs/benchmarks.md, with its title
// and the line saying where it was measured.
func (rep Report) Markdown() string {
	var b strings.Builder
	b.WriteString("# Benchmarks\n\n")
	e := rep.Env
	fmt.Fprintf(&b, "Generated by `make bench` on %s: commit %s, %s, %d cores (GOMAXPROCS %d), %s.\n\n",
		e.Date.UTC().Format("2006-01-02 15:04 MST"), e.Commit, e.GoVersion, e.CPUs, e.GOMAXPROCS, e.CPUModel)
	b.WriteString("## Proxy overhead against a bare reverse proxy\n\n")
	b.WriteString(rep.Table())
	writeMissed(&b, rep.Missed(), "Every target was met on this run.")
	return b.String()
}

// Summary is the terminal version: the table, then every missed goal on
// its own loud line, or a line saying all were met.
func (rep Report) Summary() string {
	var b strings.Builder
	b.WriteString(rep.Table())
	missed := rep.Missed()
	if len(missed) == 0 {
		b.WriteString("\nall targets met\n")
		return b.String()
	}
	fmt.Fprintf(&b, "\n!!! %d target(s) MISSED on this run (reported, not failed: see docs/benchmarks.md):\n", len(missed))
	for _, s := range missed {
		b.WriteString("!!!   " + s + "\n")
	}
	return b.String()
}
