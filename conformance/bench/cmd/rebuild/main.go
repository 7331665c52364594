// Command rebuild measures the snapshot rebuild at scale (issue 22, part
// 4): a store seeded with 10,000 principals, 50,000 keys, 1,000 upstreams
// and 100 custom router chains (impl/testing/scaleseed), then rebuilt
// again and again as Runtime.Refresh does (the configuration read and the
// build), on SQLite and, with --database-url, on PostgreSQL. It reports
// each rebuild's time, the CPU it took in this process and the heap the
// built snapshot keeps; then the incremental rebuilds that follow single
// admin changes (a key revoked or issued, a principal's limits, an
// upstream disabled); and writes a markdown section to --out.
package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/server"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/testing/cputime"
	"github.com/pillarhq/pillar/impl/testing/scaleseed"
)

const target = 50 * time.Millisecond

func main() {
	// The rebuild runs in bin/proxy under the collector setting bin/proxy
	// starts with (GOGC=400 unless set): measured under Go's default of
	// 100 it spent a third of its CPU more on marking than it does there.
	server.TuneGC(os.Getenv)
	bench.Main("rebuild", run)
}

type result struct {
	store    string
	walls    []time.Duration
	loads    []time.Duration
	cpu      time.Duration // per rebuild
	mb       float64
	sz       scaleseed.Sizes
	ups, prs int
	keys     int
	// deltas are the incremental rebuilds, by kind of change.
	deltas []deltaResult
	// baseMB is the heap a runtime keeps for deltas: the snapshot and the
	// configuration it was built from.
	baseMB float64
}

// deltaResult is n incremental rebuilds after one kind of admin change.
type deltaResult struct {
	change       string
	walls, reads []time.Duration
	cpu          time.Duration // per rebuild
}

func run(ctx context.Context, args []string) error {
	sz := scaleseed.Scale
	fs := flag.NewFlagSet("rebuild", flag.ContinueOnError)
	fs.IntVar(&sz.Principals, "principals", sz.Principals, "principals")
	fs.IntVar(&sz.Keys, "keys", sz.Keys, "keys, spread over the principals")
	fs.IntVar(&sz.Upstreams, "upstreams", sz.Upstreams, "upstreams")
	fs.IntVar(&sz.Chains, "chains", sz.Chains, "principals with a custom (pinned) router chain")
	n := fs.Int("n", 20, "rebuilds measured per store")
	dbURL := fs.String("database-url", "", "PostgreSQL server (a fresh schema is used); none: SQLite only")
	out := fs.String("out", "", "write the markdown section here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *n <= 0 {
		return fmt.Errorf("--n must be positive")
	}
	dir, err := os.MkdirTemp("", "rebuild.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(ctx, filepath.Join(dir, "gw.db"), sqlite.Options{})
	if err != nil {
		return err
	}
	r, err := measure(ctx, "SQLite", "sqlite", st, sz, *n)
	st.Close()
	if err != nil {
		return fmt.Errorf("sqlite: %w", err)
	}
	rs := []result{r}
	if *dbURL != "" {
		u, drop, err := bench.FreshSchema(ctx, *dbURL)
		if err != nil {
			return err
		}
		defer drop()
		st, err := postgres.Open(ctx, u, postgres.Options{})
		if err != nil {
			return err
		}
		r, err := measure(ctx, "PostgreSQL", "postgres", st, sz, *n)
		st.Close()
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		rs = append(rs, r)
	}
	return bench.Emit(markdown(rs, *n), *out)
}

func measure(ctx context.Context, label, dialect string, st *sqlstore.Store, sz scaleseed.Sizes, n int) (result, error) {
	r := result{store: label, sz: sz}
	box, err := secret.New([]byte(strings.Repeat("k", secret.KeySize)))
	if err != nil {
		return r, err
	}
	bench.Logf("rebuild: seeding %s with %+v", label, sz)
	if err := scaleseed.Seed(ctx, st.DB(), sz, scaleseed.Options{Dialect: dialect, BaseURL: "http://127.0.0.1:1", APIKey: "sk-seed", Seal: box}); err != nil {
		return r, err
	}
	// The heap a snapshot keeps once its configuration read is dropped.
	before := heap()
	cfg, err := st.LoadConfig(ctx)
	if err != nil {
		return r, err
	}
	snap := snapshot.Build(cfg, box, time.Now()) // cfg is dead past here: the heap below is the snapshot's
	r.mb = float64(heap()-before) / (1 << 20)
	r.ups, r.prs, r.keys = snap.Counts()
	if r.ups != sz.Upstreams || r.prs != sz.Principals || r.keys != sz.Keys || len(snap.Errors) > 0 {
		return r, fmt.Errorf("snapshot holds %d upstreams, %d principals, %d keys (errors %v); seeded %+v", r.ups, r.prs, r.keys, snap.Errors, sz)
	}
	runtime.KeepAlive(snap)
	snap = nil
	cpu0 := cputime.Process()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		cfg, err := st.LoadConfig(ctx)
		if err != nil {
			return r, err
		}
		t1 := time.Now()
		snapshot.Build(cfg, box, time.Now())
		r.walls = append(r.walls, time.Since(t0))
		r.loads = append(r.loads, t1.Sub(t0))
	}
	r.cpu = (cputime.Process() - cpu0) / time.Duration(n)
	return r, measureDeltas(ctx, &r, st, box, n)
}

// measureDeltas times incremental rebuilds as Runtime.Refresh runs them
// after one committed admin change: the change log read (LoadConfigDelta),
// the delta applied to the previous configuration (kept without its keys,
// as the runtime keeps it), the snapshot applied to the previous snapshot. Each kind of change runs n times; the final
// snapshot is checked against a full build of a full read.
func measureDeltas(ctx context.Context, r *result, st *sqlstore.Store, box *secret.Box, n int) error {
	before := heap()
	full, err := st.LoadConfig(ctx)
	if err != nil {
		return err
	}
	snap := snapshot.Build(full, box, time.Now())
	// What Runtime keeps as the base of deltas: the configuration without
	// its keys (the snapshot holds them).
	cfg := full.ApplyWithoutKeys(&store.ConfigDelta{From: full.Generation, Generation: full.Generation})
	full = nil
	r.baseMB = float64(heap()-before) / (1 << 20)
	sz := r.sz
	changes := []struct {
		name string
		do   func(i int) error
	}{
		{"revoke a key", func(i int) error {
			k := (i * 7919) % sz.Keys
			_, err := st.RevokeKey(ctx, fmt.Sprintf("pr_seed_%d", k%sz.Principals), fmt.Sprintf("key_seed_%d", k))
			return err
		}},
		{"issue a key", func(i int) error {
			h := sha256.Sum256([]byte(fmt.Sprintf("bench-key-%d", i)))
			_, err := st.CreateKey(ctx, store.Key{PrincipalID: fmt.Sprintf("pr_seed_%d", (i*31)%sz.Principals), Prefix: "bench", Hash: h[:]})
			return err
		}},
		{"patch a principal's limits", func(i int) error {
			lim := json.RawMessage(fmt.Sprintf(`[{"kind":"requests","window_secs":60,"max":%d}]`, 100+i))
			_, err := st.PatchPrincipal(ctx, fmt.Sprintf("pr_seed_%d", (i*17)%sz.Principals), store.AnyRevision, store.PrincipalPatch{DefaultLimits: &lim})
			return err
		}},
		{"disable an upstream", func(i int) error {
			off := false
			_, err := st.PatchUpstream(ctx, fmt.Sprintf("up_seed_%d", (i*13)%sz.Upstreams), store.AnyRevision, store.UpstreamPatch{Enabled: &off})
			return err
		}},
	}
	for _, c := range changes {
		dr := deltaResult{change: c.name}
		var cpu time.Duration
		for i := 0; i < n; i++ {
			if err := c.do(i); err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			cpu0 := cputime.Process()
			t0 := time.Now()
			d, err := st.LoadConfigDelta(ctx, cfg.Generation)
			if err != nil {
				return fmt.Errorf("%s: %w", c.name, err)
			}
			t1 := time.Now()
			cfg = cfg.ApplyWithoutKeys(d)
			snap = snapshot.Apply(snap, cfg, d, box, time.Now())
			dr.walls = append(dr.walls, time.Since(t0))
			dr.reads = append(dr.reads, t1.Sub(t0))
			cpu += cputime.Process() - cpu0
		}
		dr.cpu = cpu / time.Duration(n)
		r.deltas = append(r.deltas, dr)
	}
	full, err = st.LoadConfig(ctx)
	if err != nil {
		return err
	}
	if snapshot.Describe(snap) != snapshot.Describe(snapshot.Build(full, box, snap.BuiltAt)) {
		return fmt.Errorf("the snapshot applied from deltas differs from a full build")
	}
	return nil
}

func heap() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func markdown(rs []result, n int) string {
	var b strings.Builder
	sz := rs[0].sz
	fmt.Fprintf(&b, "\n## Snapshot rebuild at scale\n\n%d principals, %d keys, %d upstreams, %d custom router chains; %d rebuilds per store\n(configuration read + build, as `Runtime.Refresh` does):\n\n",
		sz.Principals, sz.Keys, sz.Upstreams, sz.Chains, n)
	b.WriteString("| store | rebuild p50 | rebuild min | rebuild max | of which read p50 | CPU per rebuild (this process) | snapshot heap | target p50 < 50 ms |\n|---|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rs {
		p50 := bench.Percentile(r.walls, .5)
		fmt.Fprintf(&b, "| %s | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f ms | %.1f MB | %s |\n", r.store,
			bench.Ms(p50), bench.Ms(bench.Percentile(r.walls, 0)), bench.Ms(bench.Percentile(r.walls, 1)), bench.Ms(bench.Percentile(r.loads, .5)),
			bench.Ms(r.cpu), r.mb, bench.MetMark(p50 < target))
	}
	b.WriteString("\nIncremental rebuilds (issue 22): after one admin change, the change log read (`LoadConfigDelta`: the\nrows of the touched principal or upstream only) and the delta applied to the previous configuration and\nsnapshot, as `Runtime.Refresh` does between full reads:\n\n")
	b.WriteString("| store | change | rebuild p50 | rebuild p99 | of which read p50 | CPU per rebuild (this process) | target p50 < 50 ms |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, r := range rs {
		for _, d := range r.deltas {
			p50 := bench.Percentile(d.walls, .5)
			fmt.Fprintf(&b, "| %s | %s | %.2f ms | %.2f ms | %.2f ms | %.2f ms | %s |\n", r.store, d.change, bench.Ms(p50),
				bench.Ms(bench.Percentile(d.walls, .99)), bench.Ms(bench.Percentile(d.reads, .5)), bench.Ms(d.cpu), bench.MetMark(p50 < target))
		}
	}
	b.WriteString("\nFull rebuild p99: ")
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1f ms", r.store, bench.Ms(bench.Percentile(r.walls, .99)))
	}
	b.WriteString(". Heap a runtime keeps for deltas (the snapshot and the configuration it was built from, without its keys): ")
	for i, r := range rs {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %.1f MB", r.store, r.baseMB)
	}
	b.WriteString(".\n")
	return b.String()
}
