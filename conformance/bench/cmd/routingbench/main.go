// Command routingbench runs a Claude-Code-shaped workload through the
// built-in router in front of simulated accounts of different limits
// (bench.RunRouting) in several modes: the strict order, spreading
// without session affinity, affinity, equal accounts, and a principal's
// concurrency cap with and without its queue. It writes the markdown
// table scripts/bench.sh puts into docs/benchmarks.md.
package main

import (
	"context"
	"flag"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() { bench.Main("routingbench", run) }

func run(ctx context.Context, args []string) error {
	w := bench.DefaultRoutingWorkload
	fs := flag.NewFlagSet("routingbench", flag.ContinueOnError)
	fs.IntVar(&w.Sessions, "sessions", w.Sessions, "sessions per run")
	out := fs.String("out", "", "write the markdown table here (default: stdout only)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	limits := []int{200, 300, 400}
	many := bench.RoutingWorkload{Sessions: 600, Parallel: 12, Turns: 2}
	modes := []bench.RoutingMode{
		{Name: "strict order (before issue 33)", Weights: []int{1, 0, 0}, Limits: limits},
		{Name: "spread by weight, no affinity", Weights: []int{2, 3, 4}, Limits: limits},
		{Name: "spread by weight, session affinity", Weights: []int{2, 3, 4}, Limits: limits, Affinity: true},
		{Name: "equal accounts, no affinity", Weights: []int{1, 1, 1}, Limits: []int{10000, 10000, 10000}},
		{Name: "equal accounts, session affinity", Weights: []int{1, 1, 1}, Limits: []int{10000, 10000, 10000}, Affinity: true},
		{Name: "equal accounts, session affinity", Weights: []int{1, 1, 1}, Limits: []int{10000, 10000, 10000}, Affinity: true, Workload: &many},
		{Name: "cap 4 in flight, no queue", Weights: []int{2, 3, 4}, Limits: limits, Affinity: true, MaxInFlight: 4},
		{Name: "cap 4 in flight, queue", Weights: []int{2, 3, 4}, Limits: limits, Affinity: true, MaxInFlight: 4, Queue: true},
	}
	var rs []bench.RoutingResult
	for _, m := range modes {
		r, err := bench.RunRouting(ctx, w, m)
		if err != nil {
			return err
		}
		rs = append(rs, r)
	}
	return bench.Emit(bench.RoutingMarkdown(w, rs), *out)
}
