// Command loadgen starts bin/sim, bin/proxy on a fresh SQLite database
// (seeded through its admin API) and two copies of --bareproxy (the
// baseline and its control), measures the gateway against the baseline
// (bench.Run, then interleaved, the OpenAI dialect and a Bedrock upstream),
// prints the figures with whether each target was met and writes the
// sections of docs/benchmarks.md. It exits non-zero only when the run
// fails, never for a missed target.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/conformance/harness"
)

func main() { bench.Main("loadgen", run) }

func run(ctx context.Context, args []string) error {
	p := bench.DefaultParams
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.IntVar(&p.Warmup, "warmup", p.Warmup, "warm-up requests per target and kind")
	fs.IntVar(&p.Latency, "n", p.Latency, "c=1 non-streaming requests per target")
	fs.IntVar(&p.Stream, "stream-n", p.Stream, "c=1 streaming requests per target")
	fs.IntVar(&p.Block, "block", p.Block, "requests per target before switching")
	fs.IntVar(&p.Clients, "clients", p.Clients, "concurrent clients for throughput")
	fs.IntVar(&p.ThroughputN, "throughput-n", p.ThroughputN, "requests per throughput run")
	fs.IntVar(&p.ThroughputRun, "throughput-runs", p.ThroughputRun, "throughput runs per target")
	commit := fs.String("commit", "unknown", "commit being measured")
	binDir := fs.String("bin-dir", "bin", "directory of bin/sim and bin/proxy")
	bareBin := fs.String("bareproxy", "", "the baseline binary (conformance/bench/cmd/bareproxy)")
	out := fs.String("out", "", "write the markdown section here")
	interN := fs.Int("interleaved-n", 2000, "interleaved c=1 rounds of each kind (one request per path in turn); 0 skips them")
	interOut := fs.String("interleaved-out", "", "write the interleaved section here")
	dialectN := fs.Int("dialect-n", 0, "interleaved c=1 streaming rounds through the gateway's /v1/chat/completions and its /v1/messages (twice, the noise floor); 0 skips them")
	dialectOut := fs.String("dialect-out", "", "write the OpenAI-dialect section here")
	bedrockN := fs.Int("bedrock-n", 0, "interleaved c=1 rounds of each kind through a gateway with a Bedrock upstream against the Anthropic one (and a second, the noise floor); 0 skips them")
	bedrockOut := fs.String("bedrock-out", "", "write the Bedrock section here")
	tailBin := fs.String("tail-proxy", "", "only the tail analysis: run this traced build of bin/proxy (conformance/bench/cmd/tracedproxy) through an interleaved series and break its slowest 1% down by what the gateway was doing")
	tailOut := fs.String("tail-out", "", "write the tail analysis here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var errs []error
	if *bareBin == "" {
		errs = append(errs, errors.New("--bareproxy is required"))
	}
	for name, v := range map[string]int{"warmup": p.Warmup, "n": p.Latency, "stream-n": p.Stream, "block": p.Block,
		"clients": p.Clients, "throughput-n": p.ThroughputN, "throughput-runs": p.ThroughputRun} {
		if v <= 0 {
			errs = append(errs, fmt.Errorf("--%s must be positive", name))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "loadgen.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st := bench.NewStack(*binDir, dir)
	defer st.Stop()
	c := bench.NewClient(nil)
	defer c.Close()
	if *tailBin != "" {
		return tail(ctx, st, c, *bareBin, *tailBin, *interN, p.Warmup, *tailOut)
	}
	s, err := start(st, *bareBin, "proxy", nil)
	if err != nil {
		return err
	}
	targets := s.targets
	rep, err := bench.Run(ctx, c, targets, p, bench.Logf)
	if err != nil {
		return err
	}
	rep.Env = bench.Environment(time.Now(), *commit)
	fmt.Print(rep.Summary())
	if err := write(*out, rep.Markdown()); err != nil {
		return err
	}
	if *interN > 0 {
		ir, err := bench.RunInterleaved(ctx, c, s.direct, targets, *interN, min(*interN, p.Warmup), bench.Logf)
		if err != nil {
			return err
		}
		if err := report(ir.Table(), ir.Missed(), *interOut, ir.Markdown()); err != nil {
			return err
		}
	}
	gw := targets[bench.Gateway]
	if *dialectN > 0 {
		dr, err := bench.RunDialects(ctx, c, s.direct, bench.Target{Name: "openai", BaseURL: gw.BaseURL, Key: gw.Key, OpenAI: true},
			bench.Target{Name: "messages", BaseURL: gw.BaseURL, Key: gw.Key}, bench.Target{Name: "messages′", BaseURL: gw.BaseURL, Key: gw.Key},
			*dialectN, min(*dialectN, p.Warmup))
		if err != nil {
			return err
		}
		if err := report(dr.Table(), dr.Missed(), *dialectOut, dr.Markdown()); err != nil {
			return err
		}
	}
	if *bedrockN > 0 {
		br, err := bedrock(ctx, st, c, s, *bedrockN, min(*bedrockN, p.Warmup))
		if err != nil {
			return err
		}
		return report(br.Table(), br.Missed(), *bedrockOut, br.Markdown())
	}
	return nil
}

// report prints a section's table and missed targets and writes its
// markdown to out.
func report(table string, missed []string, out, md string) error {
	fmt.Print(table)
	for _, m := range missed {
		fmt.Println("!!!   " + m)
	}
	return write(out, md)
}

func write(out, md string) error {
	if out == "" {
		return nil
	}
	return os.WriteFile(out, []byte(md), 0o644)
}

// stack is what one run measures: the simulator as the direct path, and
// the gateway, the baseline and its control (a second, identical
// baseline: its ratio to the first is the noise floor).
type stack struct {
	sim     *bench.Sim
	direct  bench.Target
	targets []bench.Target // Gateway, Bare, Control
}

func start(st *bench.Stack, bareBin, proxyBin string, proxyEnv map[string]string) (*stack, error) {
	sim, err := st.StartSim()
	if err != nil {
		return nil, err
	}
	gw, err := st.StartProxy(bench.ProxyOptions{Bin: proxyBin, Env: proxyEnv, Upstream: sim.VendorUpstream()})
	if err != nil {
		return nil, err
	}
	// The baselines ignore the client's key; a dummy of the same length
	// keeps the requests byte-for-byte the same size on every path.
	dummy := strings.Repeat("x", len(gw.Key))
	s := &stack{sim: sim, direct: bench.Target{Name: "direct", BaseURL: sim.URL, Key: sim.Key},
		targets: []bench.Target{{Name: "gateway", BaseURL: gw.URL, Key: gw.Key}}}
	for _, label := range []string{"bare", "control"} {
		addr, err := harness.ListenAddr()
		if err != nil {
			return nil, err
		}
		bp, err := st.Start(label, bareBin, []string{"--listen", addr, "--target", sim.URL}, map[string]string{"BAREPROXY_API_KEY": sim.Key})
		if err == nil {
			err = st.WaitUp(bp, "http://"+addr+"/")
		}
		if err != nil {
			return nil, err
		}
		s.targets = append(s.targets, bench.Target{Name: label, BaseURL: "http://" + addr, Key: dummy})
	}
	return s, nil
}

// bedrock starts a gateway with a Bedrock upstream on the simulator and a
// second one with an Anthropic upstream, and measures the first against
// the run's gateway with the second as the noise floor.
func bedrock(ctx context.Context, st *bench.Stack, c *bench.Client, s *stack, n, warmup int) (bench.Comparison, error) {
	br, err := st.StartProxy(bench.ProxyOptions{Label: "bedrock-proxy", Upstream: s.sim.BedrockUpstream()})
	if err != nil {
		return bench.Bedrock, err
	}
	cp, err := st.StartProxy(bench.ProxyOptions{Label: "anthropic-proxy", Upstream: s.sim.VendorUpstream()})
	if err != nil {
		return bench.Bedrock, err
	}
	gw := s.targets[bench.Gateway]
	return bench.Bedrock.Run(ctx, c, s.direct, bench.Target{Name: "bedrock", BaseURL: br.URL, Key: br.Key},
		bench.Target{Name: "anthropic", BaseURL: gw.BaseURL, Key: gw.Key}, bench.Target{Name: "anthropic′", BaseURL: cp.URL, Key: cp.Key}, n, warmup)
}

// tail runs the interleaved series against a traced build of the gateway
// (TRACEDPROXY_OUT), stops it so the trace is complete, and breaks the
// gateway's slowest 1% of requests down by what the gateway process was
// doing meanwhile, beside the same breakdown of all its requests.
func tail(ctx context.Context, st *bench.Stack, c *bench.Client, bareBin, tracedBin string, n, warmup int, out string) error {
	traceFile := st.Dir + "/proxy.trace"
	s, err := start(st, bareBin, tracedBin, map[string]string{"TRACEDPROXY_OUT": traceFile})
	if err != nil {
		return err
	}
	ir, err := bench.RunInterleaved(ctx, c, s.direct, s.targets, n, min(n, warmup), bench.Logf)
	if err != nil {
		return err
	}
	st.Stop() // the trace is written out when the gateway exits
	f, err := os.Open(traceFile)
	if err != nil {
		return err
	}
	defer f.Close()
	const gw = 1 + bench.Gateway // the samples start with the direct path
	slowMsg, slowSSE := bench.Slowest(ir.Messages, gw, 0.01), bench.Slowest(ir.Streams, gw, 0.01)
	bd, err := bench.AnalyzeTrace(f,
		bench.Windows(ir.Messages[gw], slowMsg), bench.Windows(ir.Messages[gw], nil),
		bench.Windows(ir.Streams[gw], slowSSE), bench.Windows(ir.Streams[gw], nil))
	if err != nil {
		return fmt.Errorf("trace: %w", err)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "### Where the slowest 1%% of the gateway's requests waited\n\n")
	fmt.Fprintf(&b, "A separate interleaved run (%d rounds of each kind) against `tracedproxy` (method: the section's notes):\n\n", n)
	b.WriteString(ir.Table())
	b.WriteString("\nNon-streaming:\n\n")
	b.WriteString(bench.TailTable(bd[0], bd[1]))
	b.WriteString("\nStreaming, to the first event:\n\n")
	b.WriteString(bench.TailTable(bd[2], bd[3]))
	return bench.Emit(b.String(), out)
}
