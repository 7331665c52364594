package limits_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// newClock starts at the beginning of a minute (and of an hour).
func newClock() *fakeclock.Clock { return fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)) }

func parse(t *testing.T, s string) []limits.Limit {
	t.Helper()
	ls, err := limits.Parse(json.RawMessage(s))
	if err != nil {
		t.Fatal(err)
	}
	return ls
}

func TestParse(t *testing.T) {
	ls := parse(t, `[{"kind":"requests","window_secs":60,"max":10},{"kind":"tokens","window_secs":3600,"max":100000}]`)
	if len(ls) != 2 || ls[0] != (limits.Limit{Kind: limits.Requests, Window: time.Minute, Max: 10}) || ls[1].String() != "100000 tokens per 3600s" {
		t.Fatalf("parsed %+v", ls)
	}
	dup := parse(t, `[{"kind":"requests","window_secs":60,"max":10},{"kind":"requests","window_secs":60,"max":4},{"kind":"requests","window_secs":61,"max":9}]`)
	if len(dup) != 2 || dup[0].Max != 4 || dup[1].Max != 9 {
		t.Fatalf("repeated kind and window parsed to %+v", dup)
	}
	for _, none := range []string{``, `null`, `[]`} {
		if ls := parse(t, none); len(ls) != 0 {
			t.Fatalf("%q parsed to %v", none, ls)
		}
	}
	for in, want := range map[string]string{
		`[{"kind":"bytes","window_secs":1,"max":1}]`:        "default_limits[0].kind",
		`[{"kind":"tokens","window_secs":0,"max":1}]`:       "default_limits[0].window_secs",
		`[{"kind":"tokens","window_secs":2678401,"max":1}]`: "default_limits[0].window_secs",
		`[{"kind":"tokens","window_secs":1,"max":0}]`:       "default_limits[0].max",
		`{}`: "default_limits",
	} {
		if _, err := limits.Parse(json.RawMessage(in)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want one naming %s", in, err, want)
		}
	}
}

func TestRequestsSlidingWindow(t *testing.T) {
	clk := newClock()
	l := limits.New(limits.Options{Clock: clk})
	ls := parse(t, `[{"kind":"requests","window_secs":60,"max":3}]`)
	for i := 0; i < 3; i++ {
		if r := l.Admit("pr_a", ls); r != nil {
			t.Fatalf("request %d refused: %+v", i, r)
		}
	}
	r := l.Admit("pr_a", ls)
	if r == nil || r.Limit != ls[0] {
		t.Fatalf("4th request in the window admitted (%+v)", r)
	}
	// All three fell at the window's start: the estimate drops to 2 once a
	// third of the next window passed, 60 + 20 s from now.
	if r.RetryAfter != 80*time.Second {
		t.Fatalf("retry after %v, want 80s", r.RetryAfter)
	}
	// Another principal has its own count; no limits means no counting.
	if l.Admit("pr_b", ls) != nil || l.Admit("pr_c", nil) != nil {
		t.Fatal("another principal refused")
	}
	// At the next window's start the previous one still weighs fully.
	clk.Advance(time.Minute)
	if l.Admit("pr_a", ls) == nil {
		t.Fatal("a burst at the window boundary went through twice")
	}
	clk.Advance(20*time.Second + time.Millisecond)
	if r := l.Admit("pr_a", ls); r != nil {
		t.Fatalf("refused after the retry-after: %+v", r)
	}
	if l.Admit("pr_a", ls) == nil {
		t.Fatal("estimate 2 + 1 admitted over max 3")
	}
	// Refused requests are not counted: two windows later everything is free.
	clk.Advance(2 * time.Minute)
	for i := 0; i < 3; i++ {
		if r := l.Admit("pr_a", ls); r != nil {
			t.Fatalf("request %d after two windows refused: %+v", i, r)
		}
	}
}

func TestTokensAndSeveralLimits(t *testing.T) {
	clk := newClock()
	l := limits.New(limits.Options{Clock: clk})
	ls := parse(t, `[{"kind":"requests","window_secs":60,"max":100},{"kind":"tokens","window_secs":3600,"max":1000}]`)
	if l.Admit("pr_a", ls) != nil {
		t.Fatal("first request refused")
	}
	l.AddTokens("pr_a", ls, 999)
	if r := l.Admit("pr_a", ls); r != nil {
		t.Fatalf("999 of 1000 tokens refused: %+v", r)
	}
	l.AddTokens("pr_a", ls, 1)
	r := l.Admit("pr_a", ls)
	if r == nil || r.Limit.Kind != limits.Tokens {
		t.Fatalf("request admitted with the token budget spent (%+v)", r)
	}
	// 1000 tokens at the hour's start: the estimate is below 999 once
	// 1/1000 of the next hour passed.
	if want := time.Hour + 3600*time.Millisecond; r.RetryAfter != want {
		t.Fatalf("retry after %v, want %v", r.RetryAfter, want)
	}
	// Tokens of a principal without token limits go nowhere.
	l.AddTokens("pr_b", parse(t, `[{"kind":"requests","window_secs":60,"max":1}]`), 5000)
	if l.Admit("pr_b", parse(t, `[{"kind":"tokens","window_secs":60,"max":1}]`)) != nil {
		t.Fatal("tokens counted against a limit the principal did not have")
	}
}

// AdmitStatus reports, per kind, the limit with the least room left:
// remaining after this request, and the reset when both windows counted so
// far have passed.
func TestAdmitStatus(t *testing.T) {
	clk := newClock()
	l := limits.New(limits.Options{Clock: clk})
	ls := parse(t, `[{"kind":"requests","window_secs":60,"max":3},{"kind":"requests","window_secs":3600,"max":100},{"kind":"tokens","window_secs":60,"max":1000}]`)
	var st limits.Status
	if r := l.AdmitStatus("pr_a", ls, &st); r != nil {
		t.Fatalf("first request refused: %+v", r)
	}
	start := clk.Now()
	want := limits.Standing{Max: 3, Remaining: 2, Reset: start.Add(2 * time.Minute)}
	if st[limits.Requests] != want {
		t.Fatalf("requests standing %+v, want %+v (the per-minute limit binds)", st[limits.Requests], want)
	}
	// No tokens counted yet: full room, replenished now.
	if got := st[limits.Tokens]; got != (limits.Standing{Max: 1000, Remaining: 1000, Reset: start}) {
		t.Fatalf("tokens standing %+v", got)
	}
	l.AddTokens("pr_a", ls, 400)
	clk.Advance(90 * time.Second) // half-way through the next minute
	if r := l.AdmitStatus("pr_a", ls, &st); r != nil {
		t.Fatalf("refused: %+v", r)
	}
	// Estimate: 1 × ½ + 1 (this request) = 1.5, rounded up.
	if got := st[limits.Requests]; got.Remaining != 1 || !got.Reset.Equal(start.Add(3*time.Minute)) {
		t.Fatalf("requests standing %+v", got)
	}
	// 400 × ½ = 200 tokens still counted; none in this minute yet.
	if got := st[limits.Tokens]; got.Remaining != 800 || !got.Reset.Equal(start.Add(2*time.Minute)) {
		t.Fatalf("tokens standing %+v", got)
	}
	l.AdmitStatus("pr_a", ls, &st)
	r := l.AdmitStatus("pr_a", ls, &st)
	if r == nil || r.Limit.Max != 3 {
		t.Fatalf("fourth request in the window admitted: %+v", r)
	}
	// A refused request is not counted and leaves no room.
	if got := st[limits.Requests]; got.Max != 3 || got.Remaining != 0 {
		t.Fatalf("standing on refusal %+v", got)
	}
	if l.AdmitStatus("pr_b", nil, &st) != nil {
		t.Fatal("no limits refused")
	}
}

func openSQLite(t *testing.T) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "gw.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}

// Two replicas on one database enforce one cluster-wide limit once synced.
func TestReplicasShareCounts(t *testing.T) {
	st := openSQLite(t)
	clk := newClock()
	a := limits.New(limits.Options{Store: st, Clock: clk})
	b := limits.New(limits.Options{Store: st, Clock: clk})
	ls := parse(t, `[{"kind":"requests","window_secs":60,"max":4},{"kind":"tokens","window_secs":60,"max":1000}]`)
	ctx := context.Background()
	for i := 0; i < 2; i++ {
		if a.Admit("pr_a", ls) != nil || b.Admit("pr_a", ls) != nil {
			t.Fatal("refused below the limit")
		}
	}
	for _, l := range []*limits.Limiter{a, b, a} {
		if err := l.Sync(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if a.Admit("pr_a", ls) == nil || b.Admit("pr_a", ls) == nil {
		t.Fatal("replicas admitted past the cluster-wide limit after syncing")
	}
	// Tokens counted on one replica refuse on the other.
	clk.Advance(3 * time.Minute)
	if a.Admit("pr_a", ls) != nil {
		t.Fatal("refused in a fresh window")
	}
	a.AddTokens("pr_a", ls, 1500)
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if err := b.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if r := b.Admit("pr_a", ls); r == nil || r.Limit.Kind != limits.Tokens {
		t.Fatalf("other replica's tokens not seen: %+v", r)
	}
}

type failing struct {
	limits.Store
	fail bool
}

func (f *failing) SyncLimitWindows(ctx context.Context, d []store.LimitWindow, now time.Time) ([]store.LimitWindow, error) {
	if f.fail {
		return nil, errors.New("database down")
	}
	return f.Store.SyncLimitWindows(ctx, d, now)
}

// A failed sync keeps the counts: they are enforced meanwhile and reach
// the database with the next sync.
func TestSyncFailureKeepsCounts(t *testing.T) {
	st := &failing{Store: openSQLite(t), fail: true}
	clk := newClock()
	var logs bytes.Buffer
	a := limits.New(limits.Options{Store: st, Clock: clk, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ls := parse(t, `[{"kind":"requests","window_secs":3600,"max":2}]`)
	ctx := context.Background()
	a.Admit("pr_a", ls)
	for i := 0; i < 2; i++ {
		if err := a.Sync(ctx); err == nil {
			t.Fatal("sync against a failing store succeeded")
		}
	}
	if n := strings.Count(logs.String(), "not synced"); n != 1 {
		t.Fatalf("outage logged %d times, want once:\n%s", n, logs.String())
	}
	a.Admit("pr_a", ls)
	if a.Admit("pr_a", ls) == nil {
		t.Fatal("counts lost by a failed sync")
	}
	st.fail = false
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logs.String(), "synced again") {
		t.Fatalf("recovery not logged:\n%s", logs.String())
	}
	rows, err := st.Store.SyncLimitWindows(ctx, nil, clk.Now())
	if err != nil || len(rows) != 1 || rows[0].Count != 2 {
		t.Fatalf("stored %v (%v), want one window with 2", rows, err)
	}
	// Syncing again adds nothing twice.
	if err := a.Sync(ctx); err != nil {
		t.Fatal(err)
	}
	if rows, _ := st.Store.SyncLimitWindows(ctx, nil, clk.Now()); rows[0].Count != 2 {
		t.Fatalf("count %d after a second sync, want 2", rows[0].Count)
	}
}

// Run syncs once more when stopped, so a replica shutting down hands over
// what it counted.
func TestRunSyncsOnStop(t *testing.T) {
	st := openSQLite(t)
	l := limits.New(limits.Options{Store: st, SyncEvery: time.Hour})
	ls := parse(t, `[{"kind":"requests","window_secs":60,"max":5}]`)
	l.Admit("pr_a", ls)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	cancel()
	<-done
	rows, err := st.SyncLimitWindows(context.Background(), nil, time.Now())
	if err != nil || len(rows) != 1 || rows[0].Count != 1 {
		t.Fatalf("stored %v (%v) after stop", rows, err)
	}
}

// synced reports each sync's reading of the clock and its deltas.
type synced chan syncCall

type syncCall struct {
	count int64
	at    time.Time
}

func (s synced) SyncLimitWindows(_ context.Context, deltas []store.LimitWindow, now time.Time) ([]store.LimitWindow, error) {
	for _, d := range deltas {
		s <- syncCall{d.Count, now}
	}
	return nil, nil
}

// Run syncs each time SyncEvery passes on the injected clock, counting
// what was admitted since, and not before.
func TestRunSyncsOnTheInjectedClock(t *testing.T) {
	t.Parallel()
	clk := newClock()
	st := make(synced, 1)
	l := limits.New(limits.Options{Store: st, SyncEvery: time.Minute, Clock: clk})
	ls := parse(t, `[{"kind":"requests","window_secs":3600,"max":5}]`)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { l.Run(ctx); close(done) }()
	start := clk.Now()
	for i := 1; i <= 2; i++ {
		l.Admit("pr_a", ls)
		<-clk.Armed()
		if len(st) != 0 {
			t.Fatal("synced before SyncEvery passed")
		}
		clk.Advance(time.Minute)
		if d := <-st; d.count != 1 || !d.at.Equal(start.Add(time.Duration(i)*time.Minute)) {
			t.Fatalf("sync %d: count %d read at %v", i, d.count, d.at)
		}
	}
	cancel()
	<-done
}

func BenchmarkAdmit(b *testing.B) {
	l := limits.New(limits.Options{})
	ls, _ := limits.Parse(json.RawMessage(`[{"kind":"requests","window_secs":60,"max":1000000000},{"kind":"tokens","window_secs":3600,"max":1000000000}]`))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if l.Admit("pr_a", ls) != nil {
				b.Fatal("refused")
			}
		}
	})
}
