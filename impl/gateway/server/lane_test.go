package server

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// The admin API's refreshes wait for the lane on SQLite (sharing is
// snapshot.Runtime.RefreshIn's, tested there); a refresh whose caller
// gives up while waiting rebuilds nothing.
func TestAdminRefreshesTakeTheLane(t *testing.T) {
	g := newTestGateway(t)
	ctx := context.Background()
	if _, err := g.stor.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "lane", Kind: store.KindVendorAPIKey,
		BaseURL: "https://api.example", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	before := g.rt.Current().Generation
	if err := g.lane.Acquire(ctx); err != nil { // an admin write holds the lane
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if err := g.adminRuntime().Refresh(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("refresh while the lane is held: %v, want it to wait for the lane", err)
	}
	if g.rt.Current().Generation != before {
		t.Fatal("a rebuild ran while the lane was held")
	}
	g.lane.Release()
	if err := g.adminRuntime().Refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if g.rt.Current().Generation == before {
		t.Fatal("the change was not applied once the lane was free")
	}
	if len(g.lane.sem) != 0 {
		t.Fatalf("the lane is still held by %d", len(g.lane.sem))
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
	// On PostgreSQL buildRuntime makes no lane; the admin API must then
	// get no Lane at all, not an interface holding a nil *lane.
	pg := &gateway{}
	if pg.writeLane() != nil || pg.adminRuntime().gate != nil {
		t.Fatal("no lane, yet admin writes or refreshes would take one")
	}
}

// A notification naming a generation past the snapshot's is applied; one
// naming the snapshot's own (this replica's change) rebuilds nothing; one
// without a readable generation falls back to the stored one.
func TestApplyChangeByNotifiedGeneration(t *testing.T) {
	g := newTestGateway(t)
	ctx := context.Background()
	create := func(name string) int64 {
		t.Helper()
		if _, err := g.stor.st.CreateUpstream(ctx, store.UpstreamSpec{Name: name, Kind: store.KindVendorAPIKey,
			BaseURL: "https://api.example", Enabled: true}); err != nil {
			t.Fatal(err)
		}
		gen, err := g.stor.st.ConfigGeneration(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return gen
	}
	gen := create("notified")
	g.applyChange(ctx, strconv.FormatInt(gen, 10))
	if got := g.rt.Current().Generation; got != gen {
		t.Fatalf("generation %d after a notification of %d", got, gen)
	}
	d, f := g.rt.Rebuilds()
	g.applyChange(ctx, strconv.FormatInt(gen, 10))
	if d2, f2 := g.rt.Rebuilds(); d2 != d || f2 != f {
		t.Fatal("a notification of the snapshot's own generation rebuilt it")
	}
	gen = create("unreadable")
	g.applyChange(ctx, "not-a-generation")
	if got := g.rt.Current().Generation; got != gen {
		t.Fatalf("generation %d after an unreadable notification; the stored one is %d", got, gen)
	}
}
