package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

// profiles is --profile-top for one store: a CPU profile of every replica
// in back-to-back windows while the admin load runs, and the CPU each
// process and the machine used meanwhile.
type profiles struct {
	label    string
	dir      string
	pids     map[string]int
	before   bench.CPUClock
	started  time.Time
	replicas []*bench.Profiler
}

// startProfiles starts profiling when --profile-top is set (else it
// returns nil, whose report is empty).
func startProfiles(ctx context.Context, p params, tmp string, res result, admins []string, token string, pids map[string]int) (*profiles, error) {
	if p.profileTop == "" {
		return nil, nil
	}
	dir := tmp
	pr := &profiles{label: res.label, dir: dir, pids: pids}
	store := "sqlite"
	if res.replicas > 1 {
		store = "postgres"
	}
	for i, a := range admins {
		pr.replicas = append(pr.replicas, &bench.Profiler{AdminURL: a, Token: token, Window: time.Second,
			Dir: dir, Prefix: fmt.Sprintf("adminload-%s-proxy-%d", store, i)})
	}
	pr.before, pr.started = bench.ReadCPUClock(pids), time.Now()
	for _, r := range pr.replicas {
		r.Start(ctx)
	}
	return pr, nil
}

// report stops the profilers and renders the CPU split and the tops: the
// measured replica (A) alone, then the others merged.
func (pr *profiles) report(ctx context.Context) (string, error) {
	if pr == nil {
		return "", nil
	}
	wall := time.Since(pr.started)
	used := bench.ReadCPUClock(pr.pids).Since(pr.before)
	var files [][]string
	for _, r := range pr.replicas {
		f, err := r.Stop()
		if err != nil {
			return "", err
		}
		files = append(files, f)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "## %s: CPU during the admin load (%.1f s wall)\n\n", pr.label, wall.Seconds())
	fmt.Fprintf(&b, "machine: %.1f of %.1f CPU-seconds busy (%.0f%%; every process on the host, the bench's and others')\n",
		used.Machine.Busy.Seconds(), used.Machine.Total.Seconds(), 100*used.Machine.Busy.Seconds()/max(used.Machine.Total.Seconds(), 1e-9))
	names := make([]string, 0, len(used.Procs))
	for k := range used.Procs {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		fmt.Fprintf(&b, "%-8s %6.2f CPU-s (%.0f%% of one core)\n", k, used.Procs[k].Seconds(), 100*used.Procs[k].Seconds()/wall.Seconds())
	}
	b.WriteString("(self is the bench: admin clients and the c=1 proxy client; a PostgreSQL server is not counted here)\n")
	top := func(title string, fs []string, cum bool) error {
		if len(fs) == 0 {
			return nil
		}
		out, err := bench.PprofTop(ctx, fs, 30, cum)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "\n### %s (%d one-second profiles)\n\n```\n%s```\n", title, len(fs), out)
		return nil
	}
	if err := top("proxy-0 (the measured replica), by flat time", files[0], false); err != nil {
		return "", err
	}
	if err := top("proxy-0, by cumulative time", files[0], true); err != nil {
		return "", err
	}
	if len(files) > 1 {
		if err := top("the other replicas merged, by flat time", slices.Concat(files[1:]...), false); err != nil {
			return "", err
		}
	}
	b.WriteString("\n")
	return b.String(), nil
}

// writeProfiles writes every store's report to --profile-top.
func writeProfiles(p params, rs []result) error {
	var b strings.Builder
	b.WriteString("# adminload: where the proxies' CPU went during the admin load\n\n")
	fmt.Fprintf(&b, "%d admin writes from %d clients; CPU profiles from /debug/pprof/profile (PROXY_DEBUG_PPROF=true) in one-second windows while the load ran; a window still open when it ended is dropped.\n\n", p.writes, p.workers)
	for _, r := range rs {
		b.WriteString(r.profile)
	}
	if err := os.MkdirAll(filepath.Dir(p.profileTop), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p.profileTop, []byte(b.String()), 0o644)
}
