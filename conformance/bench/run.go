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
	rep := Report{Method: p.Method(len(targets) > Control)}
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

// Method describes how the figures were taken, for the report.
func (p Params) Method(control bool) string {
	noise := ""
	if control {
		noise = `

The last column is a control: a second bareproxy process, identical to the first, measured in the
same rotation. Its ratio to the first is what this machine's noise alone does to a ratio on this
run; a gateway ratio within that distance of its target says little either way.`
	}
	return fmt.Sprintf(`Method. Processes on loopback: the provider simulator (bin/sim); the gateway (bin/proxy on a fresh
SQLite file with one vendor_api_key upstream, one principal allowed every model and one key); the
baseline, bareproxy (conformance/bench/cmd/bareproxy), a stock `+"`httputil.ReverseProxy`"+` that sets
the upstream key; and the load generator (conformance/bench/cmd/loadgen). The baseline uses the
relay's `+"`relay.NewTransport()`"+` and bin/proxy's server timeouts, pools its copy buffers and reads
the request body into memory before proxying it, as the relay does, so what remains between the two
is the gateway's own work. (Streaming the body is no usable baseline: net/http's server closes the
request body when the response headers go out, the transport reads it once more to check its
length, fails and drops the upstream connection mid-stream, golang/go#40747; it also sends the
request headers and the body in separate writes.) Every binary is built the same way (`+"`-trimpath`"+`,
CGO off) and runs with the default GOMAXPROCS. The gateway does all of its per-request work: key
hash and snapshot lookup, body scan, model check, routing, credential swap, metrics, usage capture
and the batched request-event write to SQLite.

After a warm-up (%d sequential requests of each kind per path, then a %d-client burst), each
c=1 series sends %d non-streaming and %d streaming requests per path, one at a time, in
blocks of %d per path with the order reversing every round (A B C, C B A, A B C, …), so drift in
machine load falls on every path alike. Latency is to the last byte of the body; time to first
event is to the end of the first server-sent event. Throughput is %d clients on keep-alive
connections sending %d requests per run, %d runs per path in alternating order, reported as total
requests over total time. Ratios are gateway ÷ baseline.%s

A missed target is printed loudly and listed above but does not fail make bench: this is a shared
2-core machine where the simulator, the proxies and the load generator compete for the same cores,
and other work on the machine moves single runs by more than the margins being checked. make bench
exits non-zero only when something fails (a build, a start-up, any request that is not a complete
200 answer). The micro-benchmarks below isolate the per-request CPU and allocation cost of the
proxy path.`,
		p.Warmup, p.Clients, p.Latency, p.Stream, p.Block, p.Clients, p.ThroughputN, p.ThroughputRun, noise)
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
