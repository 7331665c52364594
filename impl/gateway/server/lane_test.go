package server

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Refreshes wait for the lane, and the callers that waited together share
// one rebuild that starts after all of them arrived; a later caller gets a
// rebuild of its own.
func TestLaneRefresherWaitsAndSharesRebuilds(t *testing.T) {
	g := newTestGateway(t)
	var swaps atomic.Int32
	g.rt.OnSwap = func(*snapshot.Snapshot) { swaps.Add(1) }
	ln := newLane(1)
	l := &laneRefresher{rt: g.rt, lane: ln}
	ctx := context.Background()

	if err := ln.Acquire(ctx); err != nil { // an admin write holds the lane
		t.Fatal(err)
	}
	const n = 6
	errs := make(chan error, n)
	for range n {
		go func() { errs <- l.Refresh(ctx) }()
	}
	for l.waiting.Load() < n {
		runtime.Gosched()
	}
	if s := swaps.Load(); s != 0 {
		t.Fatalf("%d rebuilds ran while the lane was held", s)
	}
	ln.Release()
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := swaps.Load(); s != 1 {
		t.Fatalf("%d rebuilds for %d callers that waited together, want 1", s, n)
	}
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if s := swaps.Load(); s != 2 {
		t.Fatalf("a caller arriving after the shared rebuild got none of its own (%d rebuilds)", s)
	}
	// Callers that arrive while another replica's notification waits for
	// the lane share its rebuild. A blocked channel send is served first
	// in, first out, so the notification queued first goes first.
	if _, err := g.stor.st.CreatePrincipal(ctx, store.Principal{Name: "elsewhere", Kind: "machine", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	if err := ln.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	notified := make(chan error, 1)
	go func() { _, err := l.RefreshIfChanged(ctx); notified <- err }()
	for l.waiting.Load() < 1 {
		runtime.Gosched()
	}
	for range n {
		go func() { errs <- l.Refresh(ctx) }()
	}
	for l.waiting.Load() < n+1 {
		runtime.Gosched()
	}
	ln.Release()
	if err := <-notified; err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if s := swaps.Load(); s != 3 {
		t.Fatalf("%d rebuilds in all, want 3: callers behind the notification's rebuild made their own", s)
	}
	// The lane is free again: a write can take it at once.
	if len(ln.sem) != 0 {
		t.Fatalf("the lane is still held by %d", len(ln.sem))
	}
}

// On one processor the lane still admits one writer.
func TestLaneNeverEmpty(t *testing.T) {
	if cap(newLane(0).sem) != 1 {
		t.Fatal("a lane on one processor must still admit one writer")
	}
}

// Admin writes take the lane on SQLite, whose engine runs in the process;
// on PostgreSQL they mostly wait for the server and do not.
func TestWriteLaneOnSQLiteOnly(t *testing.T) {
	g := newTestGateway(t)
	if g.writeLane() == nil {
		t.Fatal("SQLite: admin writes do not take the lane")
	}
	pg := &gateway{cfg: &Config{db: DatabaseURL{Driver: Postgres}}, lane: newLane(1)}
	if pg.writeLane() != nil {
		t.Fatal("PostgreSQL: admin writes take the lane")
	}
}
