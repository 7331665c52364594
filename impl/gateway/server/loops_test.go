package server

import (
	"slices"
	"testing"
)

// The proxy starts its background loops as one list and shutdown stops
// every one of them: none is still running once shutdown returns.
func TestShutdownStopsEveryLoop(t *testing.T) {
	r := startForTest(t, nil, nil)
	want := []string{"capture", "reconcile", "routing-share", "affinity-share", "keepalive", "alerts", "pricing"} // SQLite: no notify listener
	if got := r.loops.Running(); !slices.Equal(got, want) {
		t.Fatalf("loops running %v, want %v", got, want)
	}
	if err := r.shutdown(); err != nil {
		t.Fatal(err)
	}
	if left := r.loops.Running(); len(left) != 0 {
		t.Fatalf("loops still running after shutdown: %v", left)
	}
}
