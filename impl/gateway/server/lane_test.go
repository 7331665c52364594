package server

import (
	"context"
	"fmt"
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
	// A rebuild swaps only when the configuration changed (an unchanged
	// generation is an empty delta): each phase commits a change first.
	changes := 0
	change := func() {
		changes++
		if _, err := g.stor.st.CreateUpstream(ctx, store.UpstreamSpec{Name: fmt.Sprintf("lane-%d", changes), Kind: store.KindVendorAPIKey,
			BaseURL: "https://api.example", Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	change()

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
	// Counted where the lane calls the runtime: a second rebuild would
	// find no change and swap nothing, so swaps alone cannot tell.
	if s, r := swaps.Load(), l.started.Load(); s != 1 || r != 1 {
		t.Fatalf("%d rebuilds (%d swaps) for %d callers that waited together, want 1", r, s, n)
	}
	change()
	if err := l.Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if s := swaps.Load(); s != 2 {
		t.Fatalf("a caller arriving after the shared rebuild got none of its own (%d rebuilds)", s)
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
	if g.refresher == nil {
		t.Fatal("SQLite: refreshes do not take the lane")
	}
	// On PostgreSQL buildRuntime makes no lane; the admin API must then
	// get no Lane at all, not an interface holding a nil *lane.
	pg := &gateway{}
	if pg.writeLane() != nil {
		t.Fatal("no lane, yet admin writes would take one")
	}
}
