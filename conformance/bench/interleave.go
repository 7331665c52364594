package bench

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"
)

// Sample is one measured request of an interleaved series.
type Sample struct {
	Start time.Time     // when the request was sent (the load generator's clock)
	D     time.Duration // latency, or time to first event
}

// Interleaved sends n sequential requests (one client, c=1) to each target,
// one request per target in turn: round r sends one to every target,
// starting at target r mod len(targets), so no target always follows the
// same one. Unlike Series' blocks, a disturbance that recurs on a period
// (a timer, a batch write, a GC cycle) meets every path at every phase
// of it, and each round's requests are close enough in time that the
// machine's drift cancels between them. out[i][r] is target i's request of
// round r.
func (c *Client) Interleaved(ctx context.Context, targets []Target, stream bool, n int) ([][]Sample, error) {
	out := make([][]Sample, len(targets))
	for i := range out {
		out[i] = make([]Sample, n)
	}
	for r := 0; r < n; r++ {
		for j := range targets {
			i := (r + j) % len(targets)
			start := c.now()
			d, err := c.Once(ctx, targets[i], stream)
			if err != nil {
				return nil, err
			}
			out[i][r] = Sample{Start: start, D: d}
		}
	}
	return out, nil
}

// Added is what a path adds to the direct request of the same round:
// path minus direct, round by round.
func Added(path, direct []Sample) []time.Duration {
	out := make([]time.Duration, min(len(path), len(direct)))
	for r := range out {
		out[r] = path[r].D - direct[r].D
	}
	return out
}

// TailGoal bounds the gateway's added latency against the bare proxy's in
// the interleaved series (issue 24): p99 within 10%.
var TailGoal = Goal{Max: 1.1}

// InterleavedReport is the interleaved section: the added latency of each
// proxy path over the direct request, for messages and for time to first
// event, and the raw samples for the tail analysis.
type InterleavedReport struct {
	N        int
	Names    []string // the proxy paths, Gateway first, then Bare and optionally Control
	Rows     []Row
	Messages [][]Sample // per target as passed to RunInterleaved: the direct path first
	Streams  [][]Sample
	// Spread is, for each p99 row, the ratios of the same percentile taken
	// over consecutive blocks of the rounds (SpreadBlocks of them): how far
	// one shorter run would have moved the figure.
	Spread []BlockSpread
}

// SpreadBlocks is how many consecutive blocks the interleaved rounds are
// cut into for InterleavedReport.Spread.
const SpreadBlocks = 5

// BlockSpread is one row's ratio per block: gateway ÷ bare and, with a
// control, control ÷ bare.
type BlockSpread struct {
	Metric           string
	Gateway, Control []float64
}

// blockSpread computes the percentile q of every block of s (the direct
// path first, then the proxy paths) for one row.
func blockSpread(metric string, s [][]Sample, q float64, blocks int) BlockSpread {
	over := func(path int) func(lo, hi int) float64 {
		return func(lo, hi int) float64 {
			at := func(path int) float64 { return float64(Percentile(Added(s[path][lo:hi], s[0][lo:hi]), q)) }
			return at(path) / at(1+Bare)
		}
	}
	sp := BlockSpread{Metric: metric, Gateway: blockRatios(len(s[0]), blocks, over(1+Gateway))}
	if len(s) > 1+Control {
		sp.Control = blockRatios(len(s[0]), blocks, over(1+Control))
	}
	return sp
}

// blockRatios cuts n samples into blocks consecutive blocks and returns
// ratio of each block; none when there are fewer samples than blocks.
func blockRatios(n, blocks int, ratio func(lo, hi int) float64) []float64 {
	if blocks <= 1 || n < blocks {
		return nil
	}
	out := make([]float64, blocks)
	for b := range out {
		out[b] = ratio(b*n/blocks, (b+1)*n/blocks)
	}
	return out
}

// spreadRange renders the smallest and largest of xs, and their median.
func spreadRange(xs []float64) string {
	ys := slices.Clone(xs)
	slices.Sort(ys)
	return fmt.Sprintf("%.2f–%.2fx (median %.2fx)", ys[0], ys[len(ys)-1], ys[len(ys)/2])
}

// RunInterleaved measures direct (straight to the provider) and the proxy
// paths (Gateway, Bare and optionally Control) one request per path in
// turn, n non-streaming rounds then n streaming ones, after a short
// interleaved warm-up.
func RunInterleaved(ctx context.Context, c *Client, direct Target, paths []Target, n, warmup int, logf func(string, ...any)) (InterleavedReport, error) {
	rep := InterleavedReport{N: n}
	if len(paths) < 2 || len(paths) > 3 {
		return rep, fmt.Errorf("need the gateway, the baseline and at most a control, got %d paths", len(paths))
	}
	all := append([]Target{direct}, paths...)
	for _, p := range paths {
		rep.Names = append(rep.Names, p.Name)
	}
	logf("interleaved: warm-up, %d rounds of each kind", warmup)
	for _, stream := range []bool{false, true} {
		if _, err := c.Interleaved(ctx, all, stream, warmup); err != nil {
			return rep, err
		}
	}
	logf("interleaved c=1: %d rounds of one request per path (%s), non-streaming", n, names(all))
	var err error
	if rep.Messages, err = c.Interleaved(ctx, all, false, n); err != nil {
		return rep, err
	}
	logf("interleaved c=1: %d rounds of one request per path, streaming (time to first event)", n)
	if rep.Streams, err = c.Interleaved(ctx, all, true, n); err != nil {
		return rep, err
	}
	row := func(metric string, s [][]Sample, q float64) Row { return addedRow(metric, s, q, TailGoal) }
	rep.Rows = []Row{
		row("added latency p50", rep.Messages, .50),
		row("added latency p99", rep.Messages, .99),
		row("added time to first event p50", rep.Streams, .50),
		row("added time to first event p99", rep.Streams, .99),
	}
	// The median is reported, the goal is the tail's (issue 24).
	rep.Rows[0].Goal, rep.Rows[2].Goal = Goal{}, Goal{}
	rep.Spread = []BlockSpread{
		blockSpread(rep.Rows[1].Metric, rep.Messages, .99, SpreadBlocks),
		blockSpread(rep.Rows[3].Metric, rep.Streams, .99, SpreadBlocks),
	}
	return rep, nil
}

// addedRow is the percentile q of what each path of s (the direct path
// first) adds to the direct request of the same round, in microseconds.
func addedRow(metric string, s [][]Sample, q float64, goal Goal) Row {
	r := Row{Metric: metric, Unit: "µs", Goal: goal, Values: make([]float64, len(s)-1)}
	for i := range r.Values {
		r.Values[i] = Micros(Percentile(Added(s[i+1], s[0]), q))
	}
	return r
}

func names(ts []Target) string {
	s := make([]string, len(ts))
	for i, t := range ts {
		s[i] = t.Name
	}
	return strings.Join(s, ", ")
}

// Slowest returns the rounds whose added latency on path (an index into
// the samples, direct being 0) is in the top fraction q (e.g. 0.01), the
// slowest first.
func Slowest(s [][]Sample, path int, q float64) []int {
	add := Added(s[path], s[0])
	idx := make([]int, len(add))
	for i := range idx {
		idx[i] = i
	}
	slices.SortFunc(idx, func(a, b int) int { return int(add[b] - add[a]) })
	k := max(1, int(float64(len(idx))*q+0.5))
	return idx[:min(k, len(idx))]
}

// Table renders the interleaved rows: added latency per path, the ratio
// gateway ÷ bare, the tail target where there is one, and the noise floor.
func (rep InterleavedReport) Table() string {
	var b strings.Builder
	ctl := len(rep.Names) > Control
	tableHead(&b, "metric (path − direct)", ctl)
	for _, r := range rep.Rows {
		verdict, goal := "", "—"
		if r.Goal != (Goal{}) {
			verdict, goal = " met", r.Goal.String()
			if !r.Met() {
				verdict = " **MISSED**"
			}
		}
		fmt.Fprintf(&b, "| %s | %.0f µs | %.0f µs | %.2fx%s | %s |", r.Metric, r.Values[Gateway], r.Values[Bare], r.Ratio(), verdict, goal)
		if ctl {
			fmt.Fprintf(&b, " %.2fx |", r.Noise())
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Missed lists the tail goals the gateway missed.
func (rep InterleavedReport) Missed() []string {
	var out []string
	for _, r := range rep.Rows {
		if r.Goal != (Goal{}) && !r.Met() {
			out = append(out, fmt.Sprintf("interleaved %s: gateway ÷ bare = %.2fx, target %s", r.Metric, r.Ratio(), r.Goal))
		}
	}
	return out
}

// Markdown is the interleaved section of docs/benchmarks.md.
func (rep InterleavedReport) Markdown() string {
	var b strings.Builder
	b.WriteString("## Added latency, interleaved one request per path (c=1)\n\n")
	b.WriteString(rep.Table())
	writeMissed(&b, rep.Missed(), "Every tail target was met on this run.")
	for _, sp := range rep.Spread {
		if len(sp.Gateway) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s over %d consecutive blocks of %d rounds: gateway ÷ bare %s", sp.Metric, len(sp.Gateway), rep.N/len(sp.Gateway), spreadRange(sp.Gateway))
		if len(sp.Control) > 0 {
			fmt.Fprintf(&b, ", control ÷ bare %s", spreadRange(sp.Control))
		}
		b.WriteString(".\n")
	}
	fmt.Fprintf(&b, "\n%d rounds of each kind, one request per path a round (method: the section's notes).\n", rep.N)
	return b.String()
}
