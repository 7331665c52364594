// Command loadgen measures the gateway against the bare reverse proxy on
// the same provider (bench.Run), prints the figures with whether each target
// was met, and writes the overhead section of docs/benchmarks.md. It exits
// non-zero only when the run fails, never for a missed target.
//
// With --bin-dir it starts what it measures (make bench): bin/sim,
// bin/proxy on a fresh SQLite database, seeded through its admin API, and
// two copies of --bareproxy (the baseline and its control), and stops them
// afterwards. Without it, it measures the URLs it is given.
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
	"github.com/pillarhq/pillar/conformance/harness/runner"
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
	binDir := fs.String("bin-dir", "", "start bin/sim, bin/proxy and the baselines from this directory instead of --gateway/--bare/--control")
	bareBin := fs.String("bareproxy", "", "the baseline binary (with --bin-dir)")
	out := fs.String("out", "", "write the markdown section here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := os.Getenv("LOADGEN_GATEWAY_KEY")
	var errs []string
	switch {
	case *binDir != "":
		if *bareBin == "" {
			errs = append(errs, "--bin-dir needs --bareproxy")
		}
	case *gateway == "" || *bare == "":
		errs = append(errs, "--gateway and --bare are required (or --bin-dir)")
	case key == "":
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
	if *binDir != "" {
		dir, err := os.MkdirTemp("", "loadgen.")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		st := bench.NewStack(*binDir, dir)
		defer st.Stop()
		if key, err = startStack(st, *bareBin, gateway, bare, control); err != nil {
			return err
		}
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

// startStack starts the simulator, the gateway, the baseline and its
// control (a second, identical baseline: its ratio to the first is the
// noise floor), waits until each answers, seeds the gateway and returns
// its key; the URLs are set for the run.
func startStack(st *bench.Stack, bareBin string, gateway, bare, control *string) (string, error) {
	var addrs [5]string
	for i := range addrs {
		a, err := bench.FreeAddr()
		if err != nil {
			return "", err
		}
		addrs[i] = a
	}
	sim, px, adm, bareAddr, ctl := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4]
	simKey := "sk-sim-bench-" + bench.RandomHex(8)
	token := "bench-" + bench.RandomHex(16)
	type proc struct {
		label, bin string
		args       []string
		env        map[string]string
		up         string
	}
	procs := []proc{
		{"sim", "sim", []string{"--listen", sim, "--api-key", simKey}, nil, "http://" + sim + "/_sim/clock"},
		{"proxy", "proxy", []string{"--proxy-listen", px, "--admin-listen", adm, "--database-url", "sqlite://" + st.Dir + "/bench.db",
			"--log-level", "warn", "--allow-private-upstreams"}, map[string]string{"PROXY_ADMIN_TOKEN": token}, "http://" + adm + "/admin/v1/status"},
		{"bare", bareBin, []string{"--listen", bareAddr, "--target", "http://" + sim}, map[string]string{"BAREPROXY_API_KEY": simKey}, "http://" + bareAddr + "/"},
		{"control", bareBin, []string{"--listen", ctl, "--target", "http://" + sim}, map[string]string{"BAREPROXY_API_KEY": simKey}, "http://" + ctl + "/"},
	}
	var started []*runner.Proc
	for _, p := range procs {
		rp, err := st.Start(p.label, p.bin, p.args, p.env)
		if err != nil {
			return "", err
		}
		started = append(started, rp)
	}
	for i, p := range procs {
		if err := st.WaitUp(started[i], p.up); err != nil {
			return "", err
		}
	}
	key, err := bench.Seed("http://"+adm, token, "http://"+sim, simKey)
	if err != nil {
		return "", fmt.Errorf("could not seed the gateway: %w", err)
	}
	*gateway, *bare, *control = "http://"+px, "http://"+bareAddr, "http://"+ctl
	return key, nil
}
