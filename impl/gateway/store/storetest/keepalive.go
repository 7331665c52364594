package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseKeepAlive(t *testing.T, open Opener) {
	t.Run("KeepAliveSessions", func(t *testing.T) { run(t, open, testKeepAliveSessions) })
	t.Run("KeepAliveConcurrentTurns", func(t *testing.T) { run(t, open, testKeepAliveConcurrentTurns) })
}

func kaSession(principal, hash string, at time.Time) store.KeepAliveSession {
	return store.KeepAliveSession{PrincipalID: principal, SessionHash: hash, UpstreamID: "up_1", Model: "m", TTL: 5 * time.Minute,
		TurnStartedAt: at, AnchorAt: at, ExpiresAt: at.Add(5 * time.Minute), RefreshBudget: 3, Snapshot: []byte("sealed")}
}

func testKeepAliveSessions(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	gen := must(b.st.ConfigGeneration(b.ctx))
	s := must(b.st.UpsertKeepAliveSession(b.ctx, kaSession("pr_1", "h1", now)))
	if s.Generation != 1 || s.State != "active" || s.TTL != 5*time.Minute || s.Refreshes != 0 || string(s.Snapshot) != "sealed" || !s.ExpiresAt.Equal(now.Add(5*time.Minute)) {
		t.Fatalf("new session %+v", s)
	}
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("keep-alive state bumped the config generation")
	}
	must(0, b.st.SetKeepAliveSnapshot(b.ctx, s.ID, 1, []byte("sealed-1")))
	if got := must(b.st.GetKeepAliveSession(b.ctx, s.ID)); string(got.Snapshot) != "sealed-1" {
		t.Fatalf("snapshot %q", got.Snapshot)
	}
	if !must(b.st.RecordKeepAliveRefresh(b.ctx, s.ID, 1, now.Add(4*time.Minute), now.Add(9*time.Minute))) {
		t.Fatal("refresh not recorded")
	}
	// The next turn: a new generation, a fresh budget; the old generation's
	// refreshes and stops are no-ops.
	next := kaSession("pr_1", "h1", now.Add(6*time.Minute))
	next.Snapshot = []byte("sealed-2")
	s2 := must(b.st.UpsertKeepAliveSession(b.ctx, next))
	if s2.ID != s.ID || s2.Generation != 2 || s2.Refreshes != 0 || string(s2.Snapshot) != "sealed-2" {
		t.Fatalf("next turn %+v", s2)
	}
	wantErr(t, b.st.SetKeepAliveSnapshot(b.ctx, s.ID, 1, []byte("old")), store.ErrStaleRevision)
	if must(b.st.RecordKeepAliveRefresh(b.ctx, s.ID, 1, now, now)) || must(b.st.StopKeepAliveSession(b.ctx, s.ID, 1, "x", now)) {
		t.Fatal("a stale generation changed the session")
	}
	if !must(b.st.StopKeepAliveSession(b.ctx, s.ID, 2, "max_refreshes", now)) {
		t.Fatal("stop not recorded")
	}
	got := must(b.st.GetKeepAliveSession(b.ctx, s.ID))
	if got.State != "stopped" || got.StopReason != "max_refreshes" {
		t.Fatalf("stopped %+v", got)
	}
	if must(b.st.RecordKeepAliveRefresh(b.ctx, s.ID, 2, now, now)) {
		t.Fatal("a stopped session was refreshed")
	}
	// Another principal's identical conversation is its own session.
	other := must(b.st.UpsertKeepAliveSession(b.ctx, kaSession("pr_2", "h1", now)))
	if other.ID == s.ID {
		t.Fatal("sessions shared across principals")
	}
	if n := must(b.st.DeleteExpiredKeepAliveSessions(b.ctx, now.Add(10*time.Minute))); n != 1 {
		t.Fatalf("deleted %d expired sessions, want 1 (pr_2's)", n)
	}
	if n := must(b.st.DeleteExpiredKeepAliveSessions(b.ctx, now.Add(time.Hour))); n != 1 {
		t.Fatalf("deleted %d", n)
	}
	_, err := b.st.GetKeepAliveSession(b.ctx, s.ID)
	wantErr(t, err, store.ErrNotFound)
}

// Concurrent turns of one conversation get distinct generations.
func testKeepAliveConcurrentTurns(t *testing.T, open Opener) {
	b := setup(t, open)
	var wg sync.WaitGroup
	var mu sync.Mutex
	gens := map[int64]bool{}
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s, err := b.st.UpsertKeepAliveSession(b.ctx, kaSession("pr_1", "h", b.clk.Now()))
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			gens[s.Generation] = true
			mu.Unlock()
		}()
	}
	wg.Wait()
	if len(gens) != 8 {
		t.Fatalf("generations %v", gens)
	}
}
