// Command adminload measures the admin API under write load (issue 22,
// part 5): principals created and patched per second and their p99, on
// SQLite (one bin/proxy) and on PostgreSQL (three replicas sharing the
// load), and the proxy path's c=1 latency with and without that load, to
// show the proxy path does not stall behind admin writes.
//
// It starts bin/sim and the proxies from --bin-dir through the conformance
// runner, writes a markdown section to --out, and exits non-zero only when
// something fails (a start, a write, a proxied request).
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/conformance/harness"
)

// stallLimit: a proxied request slower than this while the admin API is
// hammered counts as a stall.
const stallLimit = time.Second

// slowdownGoal is the largest loaded ÷ quiet p99 taken as "no stall": on
// two shared cores the admin writes take CPU from the proxy, which shows
// as a moderate slowdown, not as requests waiting for a write.
const slowdownGoal = 2.0

// controlMargin: with a bare reverse proxy measured beside the gateway
// (--bareproxy), the gateway also counts as not stalled when its p99
// slowdown is within this factor of the control's. On a saturated machine
// every process's tail grows; what the admin work does to the gateway's
// own path is its slowdown beyond the control's.
const controlMargin = 1.25

func main() { bench.Main("adminload", run) }

type params struct {
	writes, workers, proxyN int
	binDir, dbURL, out      string
	// profileTop, when set, receives where the proxies' CPU went during
	// the admin load (profile.go).
	profileTop string
	// bareBin, when set, is a bare reverse proxy (cmd/bareproxy) measured
	// in turns with the gateway, quiet and loaded: the control.
	bareBin string
}

type result struct {
	label  string
	load   bench.AdminLoad
	quiet  []time.Duration
	loaded []time.Duration
	// bareQuiet and bareLoaded are the control's (--bareproxy): the same
	// simulator through a bare reverse proxy, in turns with the gateway.
	bareQuiet, bareLoaded []time.Duration
	replicas              int
	// profile is the CPU report of the loaded phase (--profile-top).
	profile string
	// cpu is the CPU each process used while the admin load ran.
	cpu map[string]time.Duration
}

func run(ctx context.Context, args []string) error {
	var p params
	fs := flag.NewFlagSet("adminload", flag.ContinueOnError)
	fs.IntVar(&p.writes, "writes", 2000, "admin writes per store (half creates, half patches)")
	fs.IntVar(&p.workers, "workers", 8, "concurrent admin clients")
	fs.IntVar(&p.proxyN, "proxy-n", 1000, "c=1 proxied requests without admin load (and at least as many with it)")
	fs.StringVar(&p.binDir, "bin-dir", "bin", "directory of bin/proxy and bin/sim")
	fs.StringVar(&p.dbURL, "database-url", "", "PostgreSQL server for the three-replica run (a fresh schema); none: SQLite only")
	fs.StringVar(&p.out, "out", "", "write the markdown section here")
	fs.StringVar(&p.profileTop, "profile-top", "", "profile the proxies (CPU, through /debug/pprof/) while the admin load runs and write the CPU split and the profile tops here; needs go on PATH")
	fs.StringVar(&p.bareBin, "bareproxy", "", "a bare reverse proxy binary (cmd/bareproxy) measured in turns with replica A, quiet and loaded, as the control: what the machine's load alone does to a proxy's tail")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if p.writes < 2 || p.workers <= 0 || p.proxyN <= 0 {
		return fmt.Errorf("--writes must be at least 2, --workers and --proxy-n positive")
	}
	logf := bench.Logf
	r, err := runStore(ctx, p, "", logf)
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	rs := []result{r}
	if p.dbURL != "" {
		r, err := runStore(ctx, p, p.dbURL, logf)
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		rs = append(rs, r)
	}
	if p.profileTop != "" {
		if err := writeProfiles(p, rs); err != nil {
			return err
		}
	}
	return bench.Emit(markdown(p, rs), p.out)
}

// runStore starts the simulator and one proxy on SQLite (pgURL empty) or
// three replicas on a fresh PostgreSQL schema, then measures.
func runStore(ctx context.Context, p params, pgURL string, logf func(string, ...any)) (result, error) {
	res := result{label: "SQLite, 1 proxy", replicas: 1}
	dir, err := os.MkdirTemp("", "adminload.")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)
	st := bench.NewStack(p.binDir, dir)
	defer st.Stop()
	dburl := "sqlite://" + dir + "/bench.db"
	if pgURL != "" {
		res.label, res.replicas = "PostgreSQL, 3 replicas", 3
		u, drop, err := bench.FreshSchema(ctx, pgURL)
		if err != nil {
			return res, err
		}
		defer drop()
		dburl = u
	}
	sim, err := st.StartSim()
	if err != nil {
		return res, err
	}
	token := "bench-" + harness.RandomHex(16)
	env := map[string]string{"PROXY_MASTER_KEY": harness.RandomHex(32)}
	if p.profileTop != "" {
		env["PROXY_DEBUG_PPROF"] = "true"
	}
	pids := map[string]int{"sim": sim.Proc.Pid()}
	var admins []string
	var proxyURL string
	// Replica A migrates first; the others start once it is up.
	for i := 0; i < res.replicas; i++ {
		pr, err := st.StartProxy(bench.ProxyOptions{Label: fmt.Sprintf("proxy-%d", i), DatabaseURL: dburl, Token: token, Env: env})
		if err != nil {
			return res, err
		}
		admins = append(admins, pr.AdminURL)
		pids[fmt.Sprintf("proxy-%d", i)] = pr.Proc.Pid()
		if i == 0 {
			proxyURL = pr.URL
		}
	}
	key, _, err := bench.Seed(&harness.Admin{Base: admins[0], Token: token}, sim.VendorUpstream())
	if err != nil {
		return res, fmt.Errorf("seed: %w", err)
	}
	c := bench.NewClient(nil)
	defer c.Close()
	target := []bench.Target{{Name: "proxy", BaseURL: proxyURL, Key: key}}
	if p.bareBin != "" {
		ba, err := harness.ListenAddr()
		if err != nil {
			return res, err
		}
		bp, err := st.Start("bareproxy", p.bareBin, []string{"--listen", ba, "--target", sim.URL},
			map[string]string{"BAREPROXY_API_KEY": sim.Key})
		if err != nil {
			return res, err
		}
		// Any answer will do: the bare proxy has no health path of its own.
		if err := st.WaitUp(bp, "http://"+ba+"/"); err != nil {
			return res, err
		}
		target = append(target, bench.Target{Name: "bare", BaseURL: "http://" + ba, Key: "unused"})
	}
	// Every replica must have the key before the admin load starts.
	if _, err := c.Series(ctx, target, false, 200, 1); err != nil {
		return res, err
	}

	logf("%s: %d c=1 proxied requests, no admin load", res.label, p.proxyN)
	q, err := c.Series(ctx, target, false, p.proxyN, 1)
	if err != nil {
		return res, err
	}
	res.quiet = q[0]
	if len(q) > 1 {
		res.bareQuiet = q[1]
	}

	logf("%s: %d admin writes from %d clients, c=1 proxied requests meanwhile", res.label, p.writes, p.workers)
	type loadDone struct {
		l   bench.AdminLoad
		err error
	}
	done := make(chan loadDone, 1)
	prof, err := startProfiles(ctx, p, dir, res, admins, token, pids)
	if err != nil {
		return res, err
	}
	cpu0 := bench.ReadCPUClock(pids)
	go func() {
		l, err := bench.HammerAdmin(ctx, admins, token, "load", p.workers, p.writes)
		done <- loadDone{l, err}
	}()
	var ld loadDone
	for round, finished := 0, false; !finished; round++ {
		// One request per path in turn, the order alternating, as the
		// quiet series does.
		for j := range target {
			i := j
			if round%2 == 1 {
				i = len(target) - 1 - j
			}
			d, err := c.Once(ctx, target[i], false)
			if err != nil {
				return res, err
			}
			if i == 0 {
				res.loaded = append(res.loaded, d)
			} else {
				res.bareLoaded = append(res.bareLoaded, d)
			}
		}
		select {
		case ld = <-done:
			finished = true
		default:
		}
	}
	res.cpu = bench.ReadCPUClock(pids).Since(cpu0).Procs
	if res.profile, err = prof.report(ctx); err != nil {
		return res, err
	}
	if ld.err != nil {
		return res, ld.err
	}
	res.load = ld.l
	return res, nil
}

// noStall judges r's proxy path under the admin load (see slowdownGoal
// and controlMargin) and, with a control, returns its table cells.
func noStall(r result) (bool, string) {
	p99 := bench.Slowdown(r.quiet, r.loaded, .99)
	if bench.Stalled(r.loaded, stallLimit) {
		return false, controlCells(r)
	}
	if p99 <= slowdownGoal {
		return true, controlCells(r)
	}
	if len(r.bareQuiet) == 0 || len(r.bareLoaded) == 0 {
		return false, controlCells(r)
	}
	return p99 <= controlMargin*bench.Slowdown(r.bareQuiet, r.bareLoaded, .99), controlCells(r)
}

func controlCells(r result) string {
	if len(r.bareQuiet) == 0 || len(r.bareLoaded) == 0 {
		return ""
	}
	return fmt.Sprintf(" %.2f / %.2f ms | %.2fx |", bench.Ms(bench.Percentile(r.bareQuiet, .99)), bench.Ms(bench.Percentile(r.bareLoaded, .99)),
		bench.Slowdown(r.bareQuiet, r.bareLoaded, .99))
}

func markdown(p params, rs []result) string {
	var b strings.Builder
	b.WriteString("\n## Admin API under write load\n\n")
	b.WriteString("| store | creates/s | create p50 / p99 | patches/s | patch p50 / p99 |\n|---|---:|---:|---:|---:|\n")
	for _, r := range rs {
		l := r.load
		fmt.Fprintf(&b, "| %s | %.0f | %.1f / %.1f ms | %.0f | %.1f / %.1f ms |\n", r.label,
			l.PerSecond(len(l.Creates)), bench.Ms(bench.Percentile(l.Creates, .5)), bench.Ms(bench.Percentile(l.Creates, .99)),
			l.PerSecond(len(l.Patches)), bench.Ms(bench.Percentile(l.Patches, .5)), bench.Ms(bench.Percentile(l.Patches, .99)))
	}
	b.WriteString("\nThe proxy path at c=1 (non-streaming) without and with that admin load:\n\n")
	ctl := p.bareBin != ""
	head := "| store | requests quiet / loaded | p50 quiet / loaded | p99 quiet / loaded | max loaded | p50 ratio | p99 ratio |"
	if ctl {
		head += " control: bare proxy p99 quiet / loaded | control p99 ratio |"
		head += fmt.Sprintf(" no stall (none > 1 s; p99 ratio ≤ %.0fx or ≤ %.2f × the control's) |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n", slowdownGoal, controlMargin)
	} else {
		head += fmt.Sprintf(" no stall (p99 ratio ≤ %.0fx, none > 1 s) |\n|---|---:|---:|---:|---:|---:|---:|---|\n", slowdownGoal)
	}
	b.WriteString(head)
	for _, r := range rs {
		p99 := bench.Slowdown(r.quiet, r.loaded, .99)
		ok, cells := noStall(r)
		fmt.Fprintf(&b, "| %s | %d / %d | %.2f / %.2f ms | %.2f / %.2f ms | %.1f ms | %.2fx | %.2fx |%s %s |\n", r.label,
			len(r.quiet), len(r.loaded), bench.Ms(bench.Percentile(r.quiet, .5)), bench.Ms(bench.Percentile(r.loaded, .5)),
			bench.Ms(bench.Percentile(r.quiet, .99)), bench.Ms(bench.Percentile(r.loaded, .99)), bench.Ms(bench.Percentile(r.loaded, 1)),
			bench.Slowdown(r.quiet, r.loaded, .5), p99, cells, bench.MetMark(ok))
	}
	b.WriteString("\nCPU each process used while the admin load ran, per configuration change:\n\n")
	b.WriteString("| store | changes | replica A | replica B | replica C | simulator |\n|---|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		n := len(r.load.Creates) + len(r.load.Patches)
		cell := func(k string) string {
			d, ok := r.cpu[k]
			if !ok || n == 0 {
				return "–"
			}
			return fmt.Sprintf("%.2f ms (%.1f CPU-s)", bench.Ms(d)/float64(n), d.Seconds())
		}
		fmt.Fprintf(&b, "| %s | %d | %s | %s | %s | %s |\n", r.label, n, cell("proxy-0"), cell("proxy-1"), cell("proxy-2"), cell("sim"))
	}
	fmt.Fprintf(&b, "\n%d admin clients, %d writes per store, %d quiet c=1 requests (method: the section's notes).\n", p.workers, p.writes, p.proxyN)
	return b.String()
}
