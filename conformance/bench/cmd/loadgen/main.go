// Command loadgen measures the gateway against the bare reverse proxy on
// the same provider (bench.Run), prints the figures with whether each target
// was met, and writes the overhead section of docs/benchmarks.md. It exits
// non-zero only when the run fails, never for a missed target.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string) error {
	p := bench.DefaultParams
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	gateway := fs.String("gateway", "", "gateway base URL (key in LOADGEN_GATEWAY_KEY)")
	bare := fs.String("bare", "", "bare ReverseProxy base URL")
	control := fs.String("control", "", "a second, identical bare ReverseProxy: the noise floor (optional)")
	fs.IntVar(&p.Warmup, "warmup", p.Warmup, "warm-up requests per target and kind")
	fs.IntVar(&p.Latency, "n", p.Latency, "c=1 non-streaming requests per target")
	fs.IntVar(&p.Stream, "stream-n", p.Stream, "c=1 streaming requests per target")
	fs.IntVar(&p.Block, "block", p.Block, "requests per target before switching")
	fs.IntVar(&p.Clients, "clients", p.Clients, "concurrent clients for throughput")
	fs.IntVar(&p.ThroughputN, "throughput-n", p.ThroughputN, "requests per throughput run")
	fs.IntVar(&p.ThroughputRun, "throughput-runs", p.ThroughputRun, "throughput runs per target")
	commit := fs.String("commit", "unknown", "commit being measured")
	out := fs.String("out", "", "write the markdown section here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := os.Getenv("LOADGEN_GATEWAY_KEY")
	var errs []string
	if *gateway == "" || *bare == "" {
		errs = append(errs, "--gateway and --bare are required")
	}
	if key == "" {
		errs = append(errs, "LOADGEN_GATEWAY_KEY is not set")
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"warmup", p.Warmup}, {"n", p.Latency}, {"stream-n", p.Stream}, {"block", p.Block},
		{"clients", p.Clients}, {"throughput-n", p.ThroughputN}, {"throughput-runs", p.ThroughputRun}} {
		if f.v <= 0 {
			errs = append(errs, fmt.Sprintf("--%s must be positive", f.name))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}

	// The baselines ignore the client's key; a dummy of the same length keeps
	// the requests byte-for-byte the same size on every path.
	dummy := strings.Repeat("x", len(key))
	targets := []bench.Target{{Name: "gateway", BaseURL: *gateway, Key: key}, {Name: "bare", BaseURL: *bare, Key: dummy}}
	if *control != "" {
		targets = append(targets, bench.Target{Name: "control", BaseURL: *control, Key: dummy})
	}
	c := bench.NewClient(nil)
	defer c.Close()
	logf := log.New(os.Stderr, "", log.LstdFlags).Printf
	rep, err := bench.Run(ctx, c, targets, p, logf)
	if err != nil {
		return err
	}
	rep.Env = bench.Environment(time.Now(), *commit)
	fmt.Print(rep.Summary())
	if *out != "" {
		return os.WriteFile(*out, []byte(rep.Markdown()), 0o644)
	}
	return nil
}
