package server

import (
	"context"
	"runtime"
)

// lane bounds the admin side's CPU on SQLite: admin writes (the SQL engine
// runs in this process) and the snapshot rebuilds they cause run at most
// n at a time, n one less than GOMAXPROCS, so a proxied request that
// becomes ready to run finds a free processor instead of queueing behind
// them. Without it, eight concurrent admin clients kept both processors of
// a two-core replica busy, and the proxy path's goroutines waited for one
// up to the Go scheduler's preemption tick (docs/operations.md, "Admin
// writes and the proxy path"). On PostgreSQL a write mostly waits for the
// server and no proxied request waited behind it, so there is no lane.
type lane struct{ sem chan struct{} }

func newLane(n int) *lane { return &lane{sem: make(chan struct{}, max(1, n))} }

// adminLaneSize leaves one processor to the proxy path.
func adminLaneSize() int { return runtime.GOMAXPROCS(0) - 1 }

func (l *lane) Acquire(ctx context.Context) error {
	select {
	case l.sem <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (l *lane) Release() { <-l.sem }
