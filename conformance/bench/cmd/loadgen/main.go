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
	"maps"
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
	direct := fs.String("direct", "", "the provider's base URL, for the interleaved series (key in LOADGEN_DIRECT_KEY)")
	interN := fs.Int("interleaved-n", 2000, "interleaved c=1 rounds of each kind (one request per path in turn); 0 skips them")
	interOut := fs.String("interleaved-out", "", "write the interleaved section here")
	dialectN := fs.Int("dialect-n", 0, "interleaved c=1 streaming rounds through the gateway's /v1/chat/completions and its /v1/messages (twice, the noise floor); 0 skips them")
	dialectOut := fs.String("dialect-out", "", "write the OpenAI-dialect section here")
	tailBin := fs.String("tail-proxy", "", "with --bin-dir: only the tail analysis; run this traced build of bin/proxy (conformance/bench/cmd/tracedproxy) through an interleaved series and break its slowest 1% down by what the gateway was doing")
	tailOut := fs.String("tail-out", "", "write the tail analysis here")
	abProxy := fs.String("control-proxy", "", "with --bin-dir: the control path is a second gateway built from this binary (seeded like bin/proxy) instead of a second bareproxy, so two builds meet the same rounds: an A/B of a change")
	if err := fs.Parse(args); err != nil {
		return err
	}
	key := os.Getenv("LOADGEN_GATEWAY_KEY")
	directKey := os.Getenv("LOADGEN_DIRECT_KEY")
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
	if *tailBin != "" {
		if *binDir == "" || *bareBin == "" {
			return fmt.Errorf("--tail-proxy needs --bin-dir and --bareproxy")
		}
		return tail(ctx, *binDir, *bareBin, *tailBin, *interN, p.Warmup, *tailOut)
	}
	var st *bench.Stack
	if *binDir != "" {
		dir, err := os.MkdirTemp("", "loadgen.")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		st = bench.NewStack(*binDir, dir)
		defer st.Stop()
		if key, directKey, err = startStack(st, *bareBin, "proxy", nil, gateway, bare, control, direct); err != nil {
			return err
		}
	}

	// The baselines ignore the client's key; a dummy of the same length keeps
	// the requests byte-for-byte the same size on every path.
	dummy := strings.Repeat("x", len(key))
	targets := []bench.Target{{Name: "gateway", BaseURL: *gateway, Key: key}, {Name: "bare", BaseURL: *bare, Key: dummy}}
	if *abProxy != "" {
		if *binDir == "" {
			return fmt.Errorf("--control-proxy needs --bin-dir")
		}
		url, abKey, err := startGateway(st, *abProxy, *direct, directKey)
		if err != nil {
			return err
		}
		targets = append(targets, bench.Target{Name: "control", BaseURL: url, Key: abKey})
	} else if *control != "" {
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
		if err := os.WriteFile(*out, []byte(rep.Markdown()), 0o644); err != nil {
			return err
		}
	}
	if *direct == "" {
		return nil
	}
	directT := bench.Target{Name: "direct", BaseURL: *direct, Key: directKey}
	if *interN > 0 {
		ir, err := bench.RunInterleaved(ctx, c, directT, targets, *interN, min(*interN, p.Warmup), logf)
		if err != nil {
			return err
		}
		fmt.Print(ir.Table())
		for _, m := range ir.Missed() {
			fmt.Println("!!!   " + m)
		}
		if *interOut != "" {
			if err := os.WriteFile(*interOut, []byte(ir.Markdown()), 0o644); err != nil {
				return err
			}
		}
	}
	if *dialectN <= 0 {
		return nil
	}
	gw := targets[0]
	dr, err := bench.RunDialects(ctx, c, directT, bench.Target{Name: "openai", BaseURL: gw.BaseURL, Key: gw.Key, OpenAI: true},
		bench.Target{Name: "messages", BaseURL: gw.BaseURL, Key: gw.Key}, bench.Target{Name: "messages′", BaseURL: gw.BaseURL, Key: gw.Key},
		*dialectN, min(*dialectN, p.Warmup), logf)
	if err != nil {
		return err
	}
	fmt.Print(dr.Table())
	for _, m := range dr.Missed() {
		fmt.Println("!!!   " + m)
	}
	if *dialectOut != "" {
		return os.WriteFile(*dialectOut, []byte(dr.Markdown()), 0o644)
	}
	return nil
}

// startStack starts the simulator, the gateway, the baseline and its
// control (a second, identical baseline: its ratio to the first is the
// noise floor), waits until each answers, seeds the gateway and returns
// its key; the URLs are set for the run.
func startStack(st *bench.Stack, bareBin, proxyBin string, proxyEnv map[string]string, gateway, bare, control, direct *string) (key, simKey string, err error) {
	var addrs [5]string
	for i := range addrs {
		a, err := bench.FreeAddr()
		if err != nil {
			return "", "", err
		}
		addrs[i] = a
	}
	sim, px, adm, bareAddr, ctl := addrs[0], addrs[1], addrs[2], addrs[3], addrs[4]
	proxyEnv = maps.Clone(proxyEnv)
	if proxyEnv == nil {
		proxyEnv = map[string]string{}
	}
	simKey = "sk-sim-bench-" + bench.RandomHex(8)
	token := "bench-" + bench.RandomHex(16)
	proxyEnv["PROXY_ADMIN_TOKEN"] = token
	type proc struct {
		label, bin string
		args       []string
		env        map[string]string
		up         string
	}
	procs := []proc{
		{"sim", "sim", []string{"--listen", sim, "--api-key", simKey}, nil, "http://" + sim + "/_sim/clock"},
		{"proxy", proxyBin, proxyArgs(st, px, adm, "bench"), proxyEnv, "http://" + adm + "/admin/v1/status"},
		{"bare", bareBin, []string{"--listen", bareAddr, "--target", "http://" + sim}, map[string]string{"BAREPROXY_API_KEY": simKey}, "http://" + bareAddr + "/"},
		{"control", bareBin, []string{"--listen", ctl, "--target", "http://" + sim}, map[string]string{"BAREPROXY_API_KEY": simKey}, "http://" + ctl + "/"},
	}
	var started []*runner.Proc
	for _, p := range procs {
		rp, err := st.Start(p.label, p.bin, p.args, p.env)
		if err != nil {
			return "", "", err
		}
		started = append(started, rp)
	}
	for i, p := range procs {
		if err := st.WaitUp(started[i], p.up); err != nil {
			return "", "", err
		}
	}
	key, err = bench.Seed("http://"+adm, token, "http://"+sim, simKey)
	if err != nil {
		return "", "", fmt.Errorf("could not seed the gateway: %w", err)
	}
	*gateway, *bare, *control, *direct = "http://"+px, "http://"+bareAddr, "http://"+ctl, "http://"+sim
	return key, simKey, nil
}

// proxyArgs are bin/proxy's flags for a bench gateway on a fresh SQLite
// file of its own.
func proxyArgs(st *bench.Stack, proxyAddr, adminAddr, name string) []string {
	return []string{"--proxy-listen", proxyAddr, "--admin-listen", adminAddr, "--database-url", "sqlite://" + st.Dir + "/" + name + ".db",
		"--log-level", "warn", "--allow-private-upstreams"}
}

// startGateway starts one more gateway from bin (the control of an A/B
// run), seeded like the first, and returns its URL and key.
func startGateway(st *bench.Stack, bin, simURL, simKey string) (url, key string, err error) {
	px, err := bench.FreeAddr()
	if err != nil {
		return "", "", err
	}
	adm, err := bench.FreeAddr()
	if err != nil {
		return "", "", err
	}
	token := "bench-" + bench.RandomHex(16)
	p, err := st.Start("control-proxy", bin, proxyArgs(st, px, adm, "control"), map[string]string{"PROXY_ADMIN_TOKEN": token})
	if err != nil {
		return "", "", err
	}
	if err := st.WaitUp(p, "http://"+adm+"/admin/v1/status"); err != nil {
		return "", "", err
	}
	key, err = bench.Seed("http://"+adm, token, simURL, simKey)
	if err != nil {
		return "", "", fmt.Errorf("could not seed the control gateway: %w", err)
	}
	return "http://" + px, key, nil
}

// tail runs the interleaved series against a traced build of the gateway
// (TRACEDPROXY_OUT), stops it so the trace is complete, and breaks the
// gateway's slowest 1% of requests down by what the gateway process was
// doing meanwhile, beside the same breakdown of all its requests.
func tail(ctx context.Context, binDir, bareBin, tracedBin string, n, warmup int, out string) error {
	dir, err := os.MkdirTemp("", "loadgen-tail.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st := bench.NewStack(binDir, dir)
	defer st.Stop()
	traceFile := dir + "/proxy.trace"
	var gateway, bare, control, direct string
	key, simKey, err := startStack(st, bareBin, tracedBin, map[string]string{"TRACEDPROXY_OUT": traceFile}, &gateway, &bare, &control, &direct)
	if err != nil {
		return err
	}
	dummy := strings.Repeat("x", len(key))
	c := bench.NewClient(nil)
	defer c.Close()
	logf := log.New(os.Stderr, "", log.LstdFlags).Printf
	ir, err := bench.RunInterleaved(ctx, c, bench.Target{Name: "direct", BaseURL: direct, Key: simKey},
		[]bench.Target{{Name: "gateway", BaseURL: gateway, Key: key}, {Name: "bare", BaseURL: bare, Key: dummy}, {Name: "control", BaseURL: control, Key: dummy}},
		n, min(n, warmup), logf)
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
	fmt.Fprintf(&b, "A separate interleaved run (%d rounds of each kind) against `tracedproxy`, bin/proxy with a Go execution\n", n)
	b.WriteString("trace of its whole run. Each request of the gateway path is a wall-clock window (the load generator's\n")
	b.WriteString("send to its last byte, or to the first event), matched against the trace through its clock snapshots.\n")
	b.WriteString("A window overlaps an activity when at least 20 µs of the activity fall inside it; \"largest overlap\"\n")
	b.WriteString("is the activity that covered most of the window. Figures on this traced run (the trace itself costs time):\n\n")
	b.WriteString(ir.Table())
	b.WriteString("\nNon-streaming:\n\n")
	b.WriteString(bench.TailTable(bd[0], bd[1]))
	b.WriteString("\nStreaming, to the first event:\n\n")
	b.WriteString(bench.TailTable(bd[2], bd[3]))
	fmt.Print(b.String())
	if out != "" {
		return os.WriteFile(out, []byte(b.String()), 0o644)
	}
	return nil
}
