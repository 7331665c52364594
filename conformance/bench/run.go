package bench

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"
)

// Params sizes one load run. Every phase is bounded by a request count.
type Params struct {
	Warmup        int // sequential requests per target and kind before measuring
	Latency       int // c=1 non-streaming requests per target
	Stream        int // c=1 streaming requests per target
	Block         int // requests per target before switching target
	Clients       int // concurrent clients in the throughput runs
	ThroughputN   int // requests per throughput run
	ThroughputRun int // throughput runs per target, alternating targets
}

// DefaultParams fit the whole of make bench in about three minutes on two
// cores while giving each p99 at least 5 000 samples (50 above it).
var DefaultParams = Params{
	Warmup: 500, Latency: 5000, Stream: 5000, Block: 25,
	Clients: 32, ThroughputN: 10000, ThroughputRun: 2,
}

// Run measures the paths, given in the order Gateway, Bare and optionally
// Control, and returns the report; progress goes to logf. Any failed
// request ends the run with an error: figures from a half-broken path would
// mean nothing.
func Run(ctx context.Context, c *Client, targets []Target, p Params, logf func(string, ...any)) (Report, error) {
	rep := Report{}
	if len(targets) < 2 || len(targets) > 3 {
		return rep, fmt.Errorf("need the gateway, the baseline and at most a control, got %d targets", len(targets))
	}

	logf("warming up: %d sequential requests of each kind and a %d-client burst per target", p.Warmup, p.Clients)
	for _, stream := range []bool{false, true} {
		if _, err := c.Series(ctx, targets, stream, p.Warmup, p.Block); err != nil {
			return rep, err
		}
	}
	for _, t := range targets {
		if _, err := c.Throughput(ctx, t, p.Clients, p.Clients*20); err != nil {
			return rep, err
		}
	}

	logf("c=1 latency: %d requests per target, blocks of %d", p.Latency, p.Block)
	lat, err := c.Series(ctx, targets, false, p.Latency, p.Block)
	if err != nil {
		return rep, err
	}
	logf("c=1 streaming time to first event: %d requests per target, blocks of %d", p.Stream, p.Block)
	ttfe, err := c.Series(ctx, targets, true, p.Stream, p.Block)
	if err != nil {
		return rep, err
	}
	logf("throughput: %d clients, %d requests per run, %d runs per target, alternating", p.Clients, p.ThroughputN, p.ThroughputRun)
	// Seconds per request summed over the runs, so the figure is total
	// requests over total time (the harmonic mean of the runs).
	spr := make([]float64, len(targets))
	for round := 0; round < p.ThroughputRun; round++ {
		for j := range targets {
			i := j
			if round%2 == 1 {
				i = len(targets) - 1 - j
			}
			rps, err := c.Throughput(ctx, targets[i], p.Clients, p.ThroughputN)
			if err != nil {
				return rep, err
			}
			spr[i] += 1 / rps
		}
	}

	row := func(metric, unit string, g Goal, f func(i int) float64) Row {
		r := Row{Metric: metric, Unit: unit, Goal: g, Values: make([]float64, len(targets))}
		for i := range targets {
			r.Values[i] = f(i)
		}
		return r
	}
	rep.Rows = []Row{
		row("c=1 latency p50", "µs", LatencyGoal, func(i int) float64 { return Micros(Percentile(lat[i], .50)) }),
		row("c=1 latency p99", "µs", LatencyGoal, func(i int) float64 { return Micros(Percentile(lat[i], .99)) }),
		row("streaming time to first event p50", "µs", LatencyGoal, func(i int) float64 { return Micros(Percentile(ttfe[i], .50)) }),
		row("streaming time to first event p99", "µs", LatencyGoal, func(i int) float64 { return Micros(Percentile(ttfe[i], .99)) }),
		row(fmt.Sprintf("throughput, %d clients", p.Clients), "req/s", ThroughputGoal, func(i int) float64 {
			return float64(p.ThroughputRun) / spr[i]
		}),
	}
	return rep, nil
}

// Environment describes this machine for the report.
func Environment(now time.Time, commit string) Env {
	return Env{
		Date: now, Commit: commit, GoVersion: runtime.Version(),
		CPUs: runtime.NumCPU(), GOMAXPROCS: runtime.GOMAXPROCS(0), CPUModel: cpuModel(),
	}
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err == nil {
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				return strings.Join(strings.Fields(v), " ")
			}
		}
	}
	return runtime.GOOS + "/" + runtime.GOARCH
}
