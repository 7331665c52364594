package storetest

import (
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseEventReader(t *testing.T, open Opener) {
	t.Run("EventSearch", func(t *testing.T) { run(t, open, testEventSearch) })
	t.Run("EventAggregate", func(t *testing.T) { run(t, open, testEventAggregate) })
}

// The request log: filters combine, pages follow (at, id) newest first,
// and events sharing a second are neither skipped nor repeated.
func testEventSearch(t *testing.T, open Opener) {
	b := setup(t, open)
	base := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	var evs []store.RequestEvent
	for i := 0; i < 12; i++ {
		p, status := "pr_a", 200
		if i%3 == 0 {
			p = "pr_b"
		}
		if i%4 == 0 {
			status = 429
		}
		if i == 7 {
			status = 502
		}
		// Two events per second: the cursor must break ties by id.
		evs = append(evs, store.RequestEvent{ID: "ev_" + string(rune('a'+i)), At: base.Add(time.Duration(i/2) * time.Second),
			PrincipalID: p, KeyID: "k", UpstreamID: "u", Model: map[bool]string{true: "m1", false: "m2"}[i%2 == 0], Status: status})
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	var seen []string
	q := store.EventQuery{Limit: 5}
	for page := 0; page < 5; page++ {
		got := must(b.st.SearchRequestEvents(b.ctx, q))
		for _, e := range got {
			seen = append(seen, e.ID)
		}
		if len(got) < q.Limit {
			break
		}
		last := got[len(got)-1]
		q.After = &store.EventPosition{At: last.At, ID: last.ID}
	}
	want := []string{"ev_l", "ev_k", "ev_j", "ev_i", "ev_h", "ev_g", "ev_f", "ev_e", "ev_d", "ev_c", "ev_b", "ev_a"}
	if len(seen) != len(want) {
		t.Fatalf("pages %v", seen)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("pages %v, want %v", seen, want)
		}
	}
	count := func(q store.EventQuery) int { return len(must(b.st.SearchRequestEvents(b.ctx, q))) }
	if n := count(store.EventQuery{PrincipalID: "pr_b"}); n != 4 {
		t.Fatalf("principal filter: %d", n)
	}
	if n := count(store.EventQuery{Model: "m1", StatusMin: 429, StatusMax: 429}); n != 3 {
		t.Fatalf("model and status: %d", n)
	}
	if n := count(store.EventQuery{StatusMin: 500, StatusMax: 599}); n != 1 {
		t.Fatalf("5xx: %d", n)
	}
	if n := count(store.EventQuery{Since: base.Add(2 * time.Second), Until: base.Add(4 * time.Second)}); n != 4 {
		t.Fatalf("time range: %d", n)
	}
	if n := count(store.EventQuery{PrincipalID: "pr_none"}); n != 0 {
		t.Fatalf("unknown principal: %d", n)
	}
}

// The live hours: the same sums the rollup job writes, computed without
// writing (no rollup row appears).
func testEventAggregate(t *testing.T, open Opener) {
	b := setup(t, open)
	hour := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	ev := func(at time.Time, principal string, status int, in int64) store.RequestEvent {
		return store.RequestEvent{At: at, PrincipalID: principal, KeyID: "k", UpstreamID: "u", Model: "m", Status: status, InputTokens: in, OutputTokens: 1}
	}
	if err := b.st.InsertRequestEvents(b.ctx, []store.RequestEvent{
		ev(hour.Add(5*time.Minute), "p1", 200, 10), ev(hour.Add(50*time.Minute), "p1", 500, 5),
		ev(hour.Add(70*time.Minute), "p1", 200, 7), ev(hour.Add(10*time.Minute), "p2", 200, 1),
		ev(hour.Add(130*time.Minute), "p1", 200, 100),
	}); err != nil {
		t.Fatal(err)
	}
	got := must(b.st.AggregateRequestEvents(b.ctx, hour, hour.Add(2*time.Hour)))
	if len(got) != 3 {
		t.Fatalf("buckets %+v", got)
	}
	first := got[0]
	if !first.BucketStart.Equal(hour) || first.PrincipalID != "p1" || first.Requests != 2 || first.Errors != 1 || first.InputTokens != 15 || first.OutputTokens != 2 {
		t.Fatalf("first bucket %+v", first)
	}
	if !got[2].BucketStart.Equal(hour.Add(time.Hour)) || got[2].InputTokens != 7 {
		t.Fatalf("second hour %+v", got[2])
	}
	if n := len(must(b.st.ListUsageRollups(b.ctx, hour))); n != 0 {
		t.Fatalf("aggregation wrote %d rollups", n)
	}
}
