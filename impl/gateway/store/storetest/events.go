package storetest

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseEvents(t *testing.T, open Opener) {
	t.Run("RequestEvents", func(t *testing.T) { run(t, open, testEvents) })
	t.Run("EventDialect", func(t *testing.T) { run(t, open, testEventDialect) })
	t.Run("EventTextAnyDriverStores", func(t *testing.T) { run(t, open, testEventTextAnyDriverStores) })
	t.Run("RollupAndPrune", func(t *testing.T) { run(t, open, testRollupAndPrune) })
	t.Run("AuditAndAffinity", func(t *testing.T) { run(t, open, testAuditAndAffinity) })
	t.Run("EventSearch", func(t *testing.T) { run(t, open, testEventSearch) })
	t.Run("EventAggregate", func(t *testing.T) { run(t, open, testEventAggregate) })
}

func testEvents(t *testing.T, open Opener) {
	b := setup(t, open)
	base := b.clk.Now()
	var evs []store.RequestEvent
	for i := 0; i < 5; i++ {
		evs = append(evs, store.RequestEvent{At: base.Add(time.Duration(i) * time.Minute), PrincipalID: "pr_1", KeyID: "key_1",
			UpstreamID: "up_1", Model: "m", Stream: i%2 == 0, Status: 200, InputTokens: int64(i), OutputTokens: 2,
			CacheCreationInputTokens: 3, CacheReadInputTokens: 4, DurationMillis: 5, FirstByteMillis: int64(i)})
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	got := must(b.st.ListRequestEvents(b.ctx, base.Add(2*time.Minute), 10))
	if len(got) != 3 || got[0].InputTokens != 4 || !got[0].At.Equal(base.Add(4*time.Minute)) || !got[0].Stream || got[0].CacheReadInputTokens != 4 {
		t.Fatalf("events %+v", got)
	}
	// Time to first byte round-trips; 0 (none measured) is stored as NULL
	// and read back as 0.
	for _, e := range got {
		if want := int64(e.At.Sub(base) / time.Minute); e.FirstByteMillis != want {
			t.Fatalf("event at +%v: ttfb %d, want %d", e.At.Sub(base), e.FirstByteMillis, want)
		}
	}
	if all := must(b.st.ListRequestEvents(b.ctx, base, 10)); all[len(all)-1].FirstByteMillis != 0 {
		t.Fatalf("unmeasured ttfb read back as %d", all[len(all)-1].FirstByteMillis)
	}
	if len(must(b.st.ListRequestEvents(b.ctx, base, 2))) != 2 {
		t.Fatal("limit ignored")
	}
}

// The dialect the client spoke round-trips; an event without one (recorded
// before dialects were) reads back empty.
func testEventDialect(t *testing.T, open Opener) {
	b := setup(t, open)
	at := b.clk.Now()
	evs := []store.RequestEvent{
		{ID: "ev_openai", At: at, PrincipalID: "pr_1", KeyID: "key_1", Model: "m", Status: 200, Dialect: store.DialectOpenAI},
		{ID: "ev_messages", At: at, PrincipalID: "pr_1", KeyID: "key_1", Model: "m", Status: 200, Dialect: store.DialectMessages},
		{ID: "ev_unknown", At: at, PrincipalID: "pr_1", KeyID: "key_1", Model: "m", Status: 200},
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, e := range must(b.st.ListRequestEvents(b.ctx, at, 10)) {
		got[e.ID] = e.Dialect
	}
	if got["ev_openai"] != "openai" || got["ev_messages"] != "messages" || got["ev_unknown"] != "" || len(got) != 3 {
		t.Fatalf("dialects read back %q", got)
	}
	page := must(b.st.SearchRequestEvents(b.ctx, store.EventQuery{Limit: 10}))
	for _, e := range page {
		if e.Dialect != got[e.ID] {
			t.Fatalf("search read %s's dialect as %q, list as %q", e.ID, e.Dialect, got[e.ID])
		}
	}
}

// A model or error type holding U+0000 or invalid UTF-8 (which PostgreSQL
// refuses in text) is stored with the rest of its batch, not refused with
// it: one such row would otherwise hold back every event behind it.
func testEventTextAnyDriverStores(t *testing.T, open Opener) {
	b := setup(t, open)
	at := b.clk.Now()
	evs := []store.RequestEvent{
		{At: at, PrincipalID: "pr_honest", KeyID: "key_1", Model: "claude-opus-4-1", Status: 200},
		{At: at, PrincipalID: "pr_odd", KeyID: "key_2", Model: "claude-sonnet-4-5\x00", Status: 403, ErrorType: "permission_error"},
		{At: at, PrincipalID: "pr_odd", KeyID: "key_2", Model: "m\xff\xfe", Status: 502, ErrorType: "bad\x00type\xc3"},
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatalf("a batch holding U+0000 and invalid UTF-8 was refused: %v", err)
	}
	got := must(b.st.ListRequestEvents(b.ctx, at, 10))
	if len(got) != 3 {
		t.Fatalf("stored %d of 3 events", len(got))
	}
	models := map[string]bool{}
	for _, e := range got {
		if !utf8.ValidString(e.Model) || strings.ContainsRune(e.Model, 0) || !utf8.ValidString(e.ErrorType) || strings.ContainsRune(e.ErrorType, 0) {
			t.Fatalf("event read back with unstorable text: %+q / %+q", e.Model, e.ErrorType)
		}
		models[e.Model] = true
	}
	if !models["claude-opus-4-1"] || !models["claude-sonnet-4-5\uFFFD"] {
		t.Fatalf("models read back %v", models)
	}
}

// P-JOB-2 (singletons' storage side): hourly rollups recomputed idempotently;
// pruning removes only rows older than the cut-off.
func testRollupAndPrune(t *testing.T, open Opener) {
	b := setup(t, open)
	hour := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	if err := b.st.InsertRequestEvents(b.ctx, usageEvents(hour)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ { // twice: idempotent
		n := must(b.st.RollupUsage(b.ctx, hour, hour.Add(2*time.Hour)))
		if n != 3 {
			t.Fatalf("run %d: %d buckets, want 3", i, n)
		}
	}
	checkUsageHours(t, must(b.st.ListUsageRollups(b.ctx, hour)), hour)
	n := must(b.st.Prune(b.ctx, "request_events", hour.Add(30*time.Minute)))
	if n != 2 {
		t.Fatalf("pruned %d, want 2", n)
	}
	if left := must(b.st.ListRequestEvents(b.ctx, time.Time{}, 10)); len(left) != 2 {
		t.Fatalf("left %d", len(left))
	}
	for _, table := range store.PrunableTables {
		must(b.st.Prune(b.ctx, table, hour))
	}
	if _, err := b.st.Prune(b.ctx, "principals", hour); err == nil {
		t.Fatal("pruned a configuration table")
	}
}

// Every configuration change leaves an audit row with its actor; request
// events keep upstream affinity current. Both are what pruning trims.
func testAuditAndAffinity(t *testing.T, open Opener) {
	b := setup(t, open)
	ctx := store.WithActor(b.ctx, "alice")
	u := must(b.st.CreateUpstream(ctx, apiKeySpec("a")))
	on := true
	must(b.st.PatchUpstream(ctx, u.ID, store.AnyRevision, store.UpstreamPatch{Enabled: &on}))
	p := must(b.st.CreatePrincipal(b.ctx, principal("p")))
	_, err := b.st.PatchUpstream(ctx, u.ID, 1, store.UpstreamPatch{Enabled: &on}) // stale: no audit row
	wantErr(t, err, store.ErrStaleRevision)
	es := must(b.st.ListAudit(b.ctx, time.Time{}, 10))
	if len(es) != 3 {
		t.Fatalf("audit %+v", es)
	}
	seen := map[string]string{}
	for _, e := range es {
		seen[e.ResourceKind+" "+e.Action+" "+e.ResourceID] = e.Actor
	}
	if seen["upstream create "+u.ID] != "alice" || seen["upstream update "+u.ID] != "alice" || seen["principal create "+p.ID] != "system" {
		t.Fatalf("audit %v", seen)
	}
	t0 := b.clk.Now()
	evs := []store.RequestEvent{
		{At: t0, PrincipalID: p.ID, UpstreamID: u.ID, Model: "m", Status: 200},
		{At: t0.Add(time.Minute), PrincipalID: p.ID, UpstreamID: u.ID, Model: "m", Status: 200},
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	if err := b.st.InsertRequestEvents(b.ctx, evs[:1]); err != nil { // an older event never moves it back
		t.Fatal(err)
	}
	if n := must(b.st.Prune(b.ctx, "upstream_affinity", t0.Add(30*time.Second))); n != 0 {
		t.Fatalf("affinity at %v pruned: last use was not the newest event", t0)
	}
	if n := must(b.st.Prune(b.ctx, "upstream_affinity", t0.Add(2*time.Minute))); n != 1 {
		t.Fatalf("affinity rows pruned %d, want 1", n)
	}
	if n := must(b.st.Prune(b.ctx, "audit_log", b.clk.Now().Add(time.Second))); n != 3 {
		t.Fatalf("audit rows pruned %d, want 3", n)
	}
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
	// One more event after the two hours: outside the range, not summed.
	evs := append(usageEvents(hour), usageEvent(hour.Add(130*time.Minute), "p1", 200, 100))
	if err := b.st.InsertRequestEvents(b.ctx, evs); err != nil {
		t.Fatal(err)
	}
	checkUsageHours(t, must(b.st.AggregateRequestEvents(b.ctx, hour, hour.Add(2*time.Hour))), hour)
	if n := len(must(b.st.ListUsageRollups(b.ctx, hour))); n != 0 {
		t.Fatalf("aggregation wrote %d rollups", n)
	}
}

func usageEvent(at time.Time, principal string, status int, in int64) store.RequestEvent {
	return store.RequestEvent{At: at, PrincipalID: principal, KeyID: "k", UpstreamID: "u", Model: "m", Status: status, InputTokens: in, OutputTokens: 1}
}

// usageEvents are the events the rollup job and the live aggregation are
// both checked against: in the first hour two of p1 (one failed) and one of
// p2, in the second hour one of p1.
func usageEvents(hour time.Time) []store.RequestEvent {
	return []store.RequestEvent{
		usageEvent(hour.Add(5*time.Minute), "p1", 200, 10), usageEvent(hour.Add(50*time.Minute), "p1", 500, 5),
		usageEvent(hour.Add(70*time.Minute), "p1", 200, 7), usageEvent(hour.Add(10*time.Minute), "p2", 200, 1),
	}
}

// checkUsageHours checks the hourly sums of usageEvents, in bucket order.
func checkUsageHours(t *testing.T, got []store.UsageRollup, hour time.Time) {
	t.Helper()
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
}
