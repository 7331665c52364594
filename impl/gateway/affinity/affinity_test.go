package affinity

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

func keyN(i int) Key { return HeaderKey("pr_1", fmt.Sprintf("session-%d", i)) }

// best is the rendezvous choice of k among ids with weights.
func best(k Key, ids []string, weights []int) string {
	top, win := math.Inf(-1), ""
	for i, id := range ids {
		if s := Score(k, id, weights[i]); s > top {
			top, win = s, id
		}
	}
	return win
}

// Sessions spread over the upstreams in proportion to their weights, and
// weight 0 takes none.
func TestScoreSpreadsSessionsByWeight(t *testing.T) {
	ids := []string{"up_a", "up_b", "up_c", "up_d"}
	weights := []int{1, 1, 2, 0}
	const n = 20000
	got := map[string]int{}
	for i := range n {
		got[best(keyN(i), ids, weights)]++
	}
	if got["up_d"] != 0 {
		t.Fatalf("a standby upstream won %d sessions", got["up_d"])
	}
	for i, id := range ids[:3] {
		want := float64(n) * float64(weights[i]) / 4
		if d := math.Abs(float64(got[id])-want) / want; d > 0.05 {
			t.Errorf("%s: %d sessions, want %.0f ±5%%", id, got[id], want)
		}
	}
}

// An upstream leaving moves its own sessions only; the others keep theirs.
func TestScoreMovesOnlyTheLeavingUpstreamsSessions(t *testing.T) {
	ids := []string{"up_a", "up_b", "up_c"}
	for i := range 5000 {
		k := keyN(i)
		before := best(k, ids, []int{1, 1, 1})
		after := best(k, ids, []int{1, 0, 1})
		if before != "up_b" && after != before {
			t.Fatalf("session %d moved from %s to %s though its upstream stayed", i, before, after)
		}
	}
}

func TestHeaderKey(t *testing.T) {
	if !HeaderKey("pr_1", "").IsZero() || !HeaderKey("pr_1", "a b").IsZero() || !HeaderKey("pr_1", string(make([]byte, 201))).IsZero() {
		t.Fatal("an empty, spaced or oversized session id named a session")
	}
	a, b := HeaderKey("pr_1", "7f0c"), HeaderKey("pr_2", "7f0c")
	if a.IsZero() || a == b {
		t.Fatal("one session id of two principals gave one session")
	}
	if a != HeaderKey("pr_1", "7f0c") {
		t.Fatal("the key is not a function of principal and id")
	}
	if p, ok := ParseKey(a.String()); !ok || p != a {
		t.Fatal("a key does not survive its text form")
	}
	if _, ok := ParseKey("zz"); ok {
		t.Fatal("ParseKey took a malformed key")
	}
}

// Every turn of a conversation repeats model, system, tools and the first
// message: the turns are one session; another first message is another.
func TestPromptKeyGroupsTurns(t *testing.T) {
	turn1 := `{"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"}]}`
	turn2 := `{"model":"m","system":"be brief","messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":"more"}]}`
	other := `{"model":"m","system":"be brief","messages":[{"role":"user","content":"bye"}]}`
	k1, k2, k3 := PromptKey("pr_1", []byte(turn1)), PromptKey("pr_1", []byte(turn2)), PromptKey("pr_1", []byte(other))
	if k1.IsZero() || k1 != k2 || k1 == k3 {
		t.Fatalf("turns %v %v, other %v", k1, k2, k3)
	}
	if !PromptKey("pr_1", []byte(`{"model":"m","messages":[]}`)).IsZero() || !PromptKey("pr_1", []byte(`nope`)).IsZero() {
		t.Fatal("a request without a message named a session")
	}
}

// A session landing on its rendezvous choice is no move; landing elsewhere
// is, once; it then stays there when the first choice is back, and a
// second move replaces the first.
func TestLandMovesOnceAndStays(t *testing.T) {
	tb := NewTable()
	k := keyN(1)
	t0 := time.Unix(1_800_000_000, 0)
	if tb.Land(k, "up_a", "up_a", t0) {
		t.Fatal("landing on the natural choice counted as a move")
	}
	if _, moved := tb.Moved(k); moved {
		t.Fatal("an unmoved session reads as moved")
	}
	if !tb.Land(k, "up_b", "up_a", t0.Add(time.Second)) {
		t.Fatal("landing away from the bound upstream was not a move")
	}
	if up, moved := tb.Moved(k); !moved || up != "up_b" {
		t.Fatalf("moved to %q %v", up, moved)
	}
	if tb.Land(k, "up_b", "up_a", t0.Add(2*time.Second)) {
		t.Fatal("a follow-up on the new upstream counted as another move")
	}
	if got := tb.Drain(); len(got) != 1 || got[0].Upstream != "up_b" || got[0].Session != k {
		t.Fatalf("pending moves %+v", got)
	}
	if tb.Moves() != 1 {
		t.Fatalf("moves %d", tb.Moves())
	}
	if b := tb.Bound(t0.Add(3 * time.Second)); b["up_b"] != 1 || b["up_a"] != 0 {
		t.Fatalf("bound %v", b)
	}
	tb.Sweep(t0.Add(2*time.Second + IdleWindow + time.Millisecond))
	if _, moved := tb.Moved(k); moved {
		t.Fatal("a session idle past the window is still remembered")
	}
}

// memStore is the database the replicas share.
type memStore struct {
	mu   sync.Mutex
	rows map[string]store.SessionMove
	fail bool
}

func (m *memStore) SyncAffinity(_ context.Context, moves []store.SessionMove, since time.Time) ([]store.SessionMove, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return nil, errors.New("database down")
	}
	for _, b := range moves {
		if cur, ok := m.rows[b.SessionKey]; !ok || !cur.At.After(b.At) {
			m.rows[b.SessionKey] = b
		}
	}
	var out []store.SessionMove
	for _, b := range m.rows {
		if !b.At.Before(since) {
			out = append(out, b)
		}
	}
	return out, nil
}

// A move made on one replica reaches the other at its next sync, and
// survives a failed sync on the replica that made it.
func TestSharerCarriesMovesAcrossReplicas(t *testing.T) {
	db := &memStore{rows: map[string]store.SessionMove{}}
	t0 := time.Unix(1_800_000_000, 0)
	o := service.Options{Clock: fakeclock.New(t0.Add(time.Second))}
	a, b := NewTable(), NewTable()
	sa, sb := NewSharer(a, db, o), NewSharer(b, db, o)
	k := keyN(7)
	a.Land(k, "up_b", "up_a", t0)

	db.fail = true
	if err := sa.Sync(context.Background()); err == nil {
		t.Fatal("a failing database did not fail the sync")
	}
	db.fail = false
	if err := sb.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, moved := b.Moved(k); moved {
		t.Fatal("replica b learnt a move that was never stored")
	}
	if err := sa.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := sb.Sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if up, moved := b.Moved(k); !moved || up != "up_b" {
		t.Fatalf("replica b sees the session on %q (moved %v)", up, moved)
	}
}

// The request path's lookup allocates nothing.
func TestMovedDoesNotAllocate(t *testing.T) {
	tb := NewTable()
	k := keyN(3)
	tb.Land(k, "up_b", "up_a", time.Unix(1_800_000_000, 0))
	if n := testing.AllocsPerRun(100, func() {
		_, _ = tb.Moved(k)
		_ = HeaderKey("pr_1", "5d9b4a3e-8f7c-4f0e-9a55-2b1d6c0e7f11")
		_ = Score(k, "up_a", 1)
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
}

// syncedStore reports the start of each sync's read window.
type syncedStore struct {
	*memStore
	since chan time.Time
}

func (s syncedStore) SyncAffinity(ctx context.Context, moves []store.SessionMove, since time.Time) ([]store.SessionMove, error) {
	out, err := s.memStore.SyncAffinity(ctx, moves, since)
	s.since <- since
	return out, err
}

// Run syncs each time the interval passes on the injected clock, and the
// read window follows that clock: the first reads back IdleWindow, the
// next from readOverlap before the previous.
func TestSharerRunsOnTheInjectedClock(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	db := syncedStore{&memStore{rows: map[string]store.SessionMove{}}, make(chan time.Time)}
	s := NewSharer(NewTable(), db, service.Options{Clock: c})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); s.Run(ctx, DefaultShareInterval) }()
	first := fakeclock.Start.Add(DefaultShareInterval)
	for _, want := range []time.Time{first.Add(-IdleWindow), first.Add(-readOverlap)} {
		<-c.Armed()
		c.Advance(DefaultShareInterval)
		if got := <-db.since; !got.Equal(want) {
			t.Fatalf("sync read since %v, want %v", got, want)
		}
	}
	cancel()
	<-done
}
