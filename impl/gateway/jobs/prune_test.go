package jobs

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// pruneTables lists the table label values of the prune counter's series.
func pruneTables(t *testing.T, reg *prometheus.Registry) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != "svc_scheduler_prune_rows_removed_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "table" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	slices.Sort(out)
	return out
}

// P-MET-6: the prune counter has a series for every table the job prunes
// from the start, so a scrape shows the same label set whether or not a
// prune has run yet (one that ran first used to add captured_exchanges).
func TestPruneSeriesExistBeforeTheFirstPrune(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	clk := fakeclock.New(now)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), sqlite.Options{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	reg := prometheus.NewRegistry()
	types := Types(Deps{Options: service.Options{Clock: clk}, Store: st, Metrics: scheduler.NewMetrics(reg), Retention: DefaultRetention})
	want := slices.Sorted(slices.Values(store.PrunableTables))
	if got := pruneTables(t, reg); !slices.Equal(got, want) {
		t.Fatalf("before a prune: series for %v, want %v", got, want)
	}
	i := slices.IndexFunc(types, func(typ scheduler.Type) bool { return typ.Name == Prune })
	if i < 0 {
		t.Fatal("no prune job type")
	}
	if _, err := types[i].Handler(context.Background(), scheduler.Job{}); err != nil {
		t.Fatal(err)
	}
	if got := pruneTables(t, reg); !slices.Equal(got, want) {
		t.Fatalf("after a prune: series for %v, want %v", got, want)
	}
}
