package storetest

import (
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseSpend(t *testing.T, open Opener) {
	t.Run("EventCost", func(t *testing.T) { run(t, open, testEventCost) })
	t.Run("RollupCost", func(t *testing.T) { run(t, open, testRollupCost) })
	t.Run("SumUsage", func(t *testing.T) { run(t, open, testSumUsage) })
}

func costed(ev store.RequestEvent, nanos int64, version string) store.RequestEvent {
	ev.CostNanos, ev.PriceVersion = &nanos, version
	return ev
}

// An event keeps its cost, the catalog version that priced it and its
// 1-hour cache writes; an unpriced event reads back with a nil cost, not 0.
func testEventCost(t *testing.T, open Opener) {
	b := setup(t, open)
	at := b.clk.Now()
	priced := costed(usageEvent(at, "p1", 200, 10), 1_234_567_891, "v7")
	priced.CacheCreationInputTokens, priced.CacheCreation1hInputTokens = 30, 20
	unpriced := usageEvent(at.Add(time.Second), "p1", 200, 10)
	if err := b.st.InsertRequestEvents(b.ctx, []store.RequestEvent{priced, unpriced}); err != nil {
		t.Fatal(err)
	}
	got := must(b.st.ListRequestEvents(b.ctx, at, 10))
	if len(got) != 2 || got[0].CostNanos != nil || got[0].PriceVersion != "" {
		t.Fatalf("unpriced event %+v", got)
	}
	if c := got[1].CostNanos; c == nil || *c != 1_234_567_891 || got[1].PriceVersion != "v7" || got[1].CacheCreation1hInputTokens != 20 {
		t.Fatalf("priced event %+v", got[1])
	}
	s := must(b.st.SearchRequestEvents(b.ctx, store.EventQuery{PrincipalID: "p1"}))
	if len(s) != 2 || s[1].CostNanos == nil || *s[1].CostNanos != 1_234_567_891 {
		t.Fatalf("search %+v", s)
	}
}

// Rollups and the live aggregation sum the priced costs exactly and count
// the unpriced requests apart.
func testRollupCost(t *testing.T, open Opener) {
	b := setup(t, open)
	hour := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	a := costed(usageEvent(hour.Add(time.Minute), "p1", 200, 1), 1_000_000_001, "v1")
	a.CacheCreation1hInputTokens = 4
	evs := []store.RequestEvent{a, costed(usageEvent(hour.Add(2*time.Minute), "p1", 200, 1), 2, "v2"), usageEvent(hour.Add(3*time.Minute), "p1", 200, 1)}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	check := func(name string, rs []store.UsageRollup) {
		t.Helper()
		if len(rs) != 1 || rs[0].Requests != 3 || rs[0].CostNanos != 1_000_000_003 || rs[0].UnpricedRequests != 1 || rs[0].CacheCreation1hInputTokens != 4 {
			t.Fatalf("%s: %+v", name, rs)
		}
	}
	check("aggregate", must(b.st.AggregateRequestEvents(b.ctx, hour, hour.Add(time.Hour))))
	must(b.st.RollupUsage(b.ctx, hour, hour.Add(time.Hour)))
	check("rollup", must(b.st.ListUsageRollups(b.ctx, hour)))
}

// Usage totals over a range: rolled-up whole hours and the events of the
// partial and live hours are summed once each, grouped by any subset of
// the dimensions.
func testSumUsage(t *testing.T, open Opener) {
	b := setup(t, open)
	h := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	ev := func(at time.Duration, principal, key, model string, status int, cost int64) store.RequestEvent {
		e := usageEvent(h.Add(at), principal, status, 10)
		e.KeyID, e.Model = key, model
		if cost >= 0 {
			e = costed(e, cost, "v1")
		}
		return e
	}
	evs := []store.RequestEvent{
		ev(30*time.Minute, "p1", "k1", "m1", 200, 100), // partial first hour: from events
		ev(70*time.Minute, "p1", "k1", "m1", 200, 200), // whole hour 11: rolled up
		ev(80*time.Minute, "p1", "k2", "m2", 500, -1),  // unpriced
		ev(100*time.Minute, "p2", "k3", "m1", 200, 400),
		ev(130*time.Minute, "p1", "k1", "m1", 200, 800),  // hour 12: live, not rolled up
		ev(200*time.Minute, "p1", "k1", "m1", 200, 1600), // after To
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	must(b.st.RollupUsage(b.ctx, h, h.Add(2*time.Hour)))
	// A rollup that the events no longer support shows that hour 11 is
	// read from the rollups: pruning its events changes nothing.
	must(b.st.Prune(b.ctx, "request_events", h.Add(2*time.Hour)))
	if err := b.st.InsertRequestEvents(b.ctx, []store.RequestEvent{ev(30*time.Minute, "p1", "k1", "m1", 200, 100)}); err != nil {
		t.Fatal(err)
	}
	q := store.UsageQuery{From: h.Add(15 * time.Minute), To: h.Add(150 * time.Minute), LiveFrom: h.Add(2 * time.Hour)}
	all := must(b.st.SumUsage(b.ctx, q))
	if len(all) != 1 || all[0].Requests != 5 || all[0].Errors != 1 || all[0].CostNanos != 1500 || all[0].UnpricedRequests != 1 ||
		all[0].InputTokens != 50 || all[0].PrincipalID != "" {
		t.Fatalf("total %+v", all)
	}
	q.GroupBy = []string{"model", "principal"}
	got := must(b.st.SumUsage(b.ctx, q))
	type row struct {
		p, m      string
		req, cost int64
	}
	var rows []row
	for _, u := range got {
		if u.KeyID != "" || u.UpstreamID != "" {
			t.Fatalf("ungrouped dimension set: %+v", u)
		}
		rows = append(rows, row{u.PrincipalID, u.Model, u.Requests, u.CostNanos})
	}
	want := []row{{"p1", "m1", 3, 1100}, {"p1", "m2", 1, 0}, {"p2", "m1", 1, 400}}
	if len(rows) != len(want) {
		t.Fatalf("groups %+v", rows)
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Fatalf("group %d: %+v, want %+v", i, rows[i], want[i])
		}
	}
	q.GroupBy = []string{"key"}
	if got := must(b.st.SumUsage(b.ctx, q)); len(got) != 3 || got[0].KeyID != "k1" || got[0].Requests != 3 {
		t.Fatalf("by key %+v", got)
	}
	// A range inside one hour reads only events.
	q = store.UsageQuery{From: h.Add(20 * time.Minute), To: h.Add(40 * time.Minute), LiveFrom: h.Add(2 * time.Hour), GroupBy: []string{"upstream"}}
	if got := must(b.st.SumUsage(b.ctx, q)); len(got) != 1 || got[0].UpstreamID != "u" || got[0].Requests != 1 {
		t.Fatalf("inside an hour %+v", got)
	}
	q.From, q.To = h.Add(5*time.Hour), h.Add(6*time.Hour)
	if got := must(b.st.SumUsage(b.ctx, q)); len(got) != 0 {
		t.Fatalf("empty range %+v", got)
	}
	if _, err := b.st.SumUsage(b.ctx, store.UsageQuery{From: h, To: h.Add(time.Hour), GroupBy: []string{"nope"}}); err == nil {
		t.Fatal("bad dimension accepted")
	}
}
