package snapshot_test

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/server"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/testing/cputime"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
	"github.com/pillarhq/pillar/impl/testing/scaleseed"
)

// seeded is a store filled by scaleseed, and the box that opens its
// upstream credentials.
type seeded struct {
	st interface {
		LoadConfig(ctx context.Context) (*store.Config, error)
		DB() *sql.DB
	}
	box *secret.Box
}

func seedStore(tb testing.TB, driver string, sz scaleseed.Sizes) seeded {
	tb.Helper()
	ctx := context.Background()
	box, err := secret.New(make([]byte, secret.KeySize))
	if err != nil {
		tb.Fatal(err)
	}
	var s seeded
	switch driver {
	case "sqlite":
		st, err := sqlite.Open(ctx, filepath.Join(tb.TempDir(), "gw.db"), sqlite.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.Close() })
		s.st = st
	case "postgres":
		st, err := postgres.Open(ctx, pgtest.Schema(tb), postgres.Options{})
		if err != nil {
			tb.Fatal(err)
		}
		tb.Cleanup(func() { st.Close() })
		s.st = st
	}
	s.box = box
	if err := scaleseed.Seed(ctx, s.st.DB(), sz, scaleseed.Options{
		Dialect: driver, BaseURL: "http://127.0.0.1:1", APIKey: "sk-upstream", Seal: box, Now: time.Unix(1_800_000_000, 0),
	}); err != nil {
		tb.Fatal(err)
	}
	return s
}

// TestSeededSnapshot checks that the seeded rows load into the snapshot
// the benchmark measures: every key found, every credential opened, the
// pinned chains routing to their two upstreams.
func TestSeededSnapshot(t *testing.T) {
	sz := scaleseed.Sizes{Principals: 40, Keys: 130, Upstreams: 7, Chains: 5}
	for _, driver := range []string{"sqlite", "postgres"} {
		t.Run(driver, func(t *testing.T) {
			if driver == "postgres" {
				pgtest.URL(t)
			}
			s := seedStore(t, driver, sz)
			cfg, err := s.st.LoadConfig(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			snap := snapshot.Build(cfg, s.box, time.Now())
			ups, prs, keys := snap.Counts()
			if ups != sz.Upstreams || prs != sz.Principals || keys != sz.Keys {
				t.Fatalf("counts = %d upstreams, %d principals, %d keys; want %+v", ups, prs, keys, sz)
			}
			if len(snap.Errors) != 0 || len(snap.Usable) != sz.Upstreams {
				t.Fatalf("errors %v, usable %d", snap.Errors, len(snap.Usable))
			}
			for i := 0; i < sz.Keys; i++ {
				if snap.KeyByHash(sha256.Sum256([]byte(scaleseed.KeyPlaintext("", i)))) == nil {
					t.Fatalf("key %d not in the snapshot", i)
				}
			}
			for i := 0; i < sz.Principals; i++ {
				p := snap.Principal(cfg.Principals[i].ID)
				want := sz.Upstreams
				if len(p.Routers) == 2 {
					want = 2
				}
				if len(p.Candidates) != want || p.Candidates[0].Credential != "sk-upstream" {
					t.Fatalf("principal %s: %d candidates, want %d", p.ID, len(p.Candidates), want)
				}
			}
		})
	}
}

// BenchmarkRebuildAtScale is one snapshot rebuild (the configuration read
// and the build, what Runtime.Refresh does) at scaleseed.Scale: 10,000
// principals, 50,000 keys, 1,000 upstreams, 100 custom chains.
// snapshot-MB is what the built snapshot keeps alive on the heap. It runs
// under the collector setting of bin/proxy (server.TuneGC), as the
// runtime's rebuilds do there.
func BenchmarkRebuildAtScale(b *testing.B) {
	prev := debug.SetGCPercent(-1)
	debug.SetGCPercent(prev)
	server.TuneGC(os.Getenv)
	defer debug.SetGCPercent(prev)
	for _, driver := range []string{"sqlite", "postgres"} {
		b.Run(driver, func(b *testing.B) {
			if driver == "postgres" {
				pgtest.URL(b)
			}
			s := seedStore(b, driver, scaleseed.Scale)
			ctx := context.Background()
			mb := snapshotMB(b, s)
			cpu := cputime.Process()
			b.ResetTimer()
			for b.Loop() {
				cfg, err := s.st.LoadConfig(ctx)
				if err != nil {
					b.Fatal(err)
				}
				snapshot.Build(cfg, s.box, time.Now())
			}
			b.ReportMetric(mb, "snapshot-MB")
			b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkBuildAtScale is the build alone, from a configuration in memory.
func BenchmarkBuildAtScale(b *testing.B) {
	s := seedStore(b, "sqlite", scaleseed.Scale)
	cfg, err := s.st.LoadConfig(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	cpu := cputime.Process()
	b.ResetTimer()
	for b.Loop() {
		snapshot.Build(cfg, s.box, time.Now())
	}
	b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}

// snapshotMB is the live heap a snapshot holds once the configuration it
// was built from is gone (strings it shares with the rows included).
func snapshotMB(b *testing.B, s seeded) float64 {
	heap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	before := heap()
	cfg, err := s.st.LoadConfig(context.Background())
	if err != nil {
		b.Fatal(err)
	}
	snap := snapshot.Build(cfg, s.box, time.Now()) // cfg is dead past here: the heap below is the snapshot's
	after := heap()
	runtime.KeepAlive(snap)
	return float64(after-before) / (1 << 20)
}

// BenchmarkApplyAtScale is an incremental rebuild at scaleseed.Scale from
// a delta read in memory: one principal's limits changed, or one upstream
// disabled. It is what Runtime.Refresh does after the change log read
// (Config.ApplyWithoutKeys, then Apply), the part that grows with the
// configuration.
func BenchmarkApplyAtScale(b *testing.B) {
	s := seedStore(b, "sqlite", scaleseed.Scale)
	ctx := context.Background()
	cfg, err := s.st.LoadConfig(ctx)
	if err != nil {
		b.Fatal(err)
	}
	principal := func(i int) *store.ConfigDelta {
		p := cfg.Principals[i%len(cfg.Principals)]
		p.DefaultLimits = []byte(`[{"kind":"requests","window_secs":60,"max":5}]`)
		d := &store.ConfigDelta{From: cfg.Generation, Generation: cfg.Generation + 1, PrincipalIDs: []string{p.ID}, Principals: []store.Principal{p}, Plugins: cfg.Plugins}
		for _, k := range cfg.Keys {
			if k.PrincipalID == p.ID {
				d.Keys = append(d.Keys, k)
			}
		}
		for _, c := range cfg.Chains {
			if c.PrincipalID == p.ID {
				d.Chains = append(d.Chains, c)
			}
		}
		return d
	}
	upstream := func(i int) *store.ConfigDelta {
		u := cfg.Upstreams[i%len(cfg.Upstreams)]
		u.Enabled = !u.Enabled
		return &store.ConfigDelta{From: cfg.Generation, Generation: cfg.Generation + 1, Upstreams: []store.Upstream{u}, Plugins: cfg.Plugins}
	}
	for _, c := range []struct {
		name  string
		delta func(int) *store.ConfigDelta
	}{{"principal", principal}, {"upstream", upstream}} {
		b.Run(c.name, func(b *testing.B) {
			prev := snapshot.Build(cfg, s.box, time.Now())
			deltas := make([]*store.ConfigDelta, 64)
			for i := range deltas {
				deltas[i] = c.delta(i * 97)
			}
			// The runtime's base keeps no keys (ApplyWithoutKeys).
			base := cfg.ApplyWithoutKeys(&store.ConfigDelta{From: cfg.Generation, Generation: cfg.Generation})
			cpu := cputime.Process()
			i := 0
			b.ResetTimer()
			for b.Loop() {
				d := deltas[i%len(deltas)]
				i++
				next := base.ApplyWithoutKeys(d)
				snapshot.Apply(prev, next, d, s.box, time.Now())
			}
			b.ReportMetric(float64((cputime.Process()-cpu).Microseconds())/1000/float64(b.N), "cpu-ms/op")
		})
	}
}
