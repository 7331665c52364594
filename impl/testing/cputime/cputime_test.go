package cputime

import "testing"

// Work done in between shows: the figure moves forward, never back.
func TestProcessGrowsWithWork(t *testing.T) {
	before := Process()
	x := 0
	for i := range 50_000_000 {
		x += i ^ (x >> 3)
	}
	after := Process()
	if after <= before {
		t.Fatalf("CPU time %s after a busy loop (%d), %s before", after, x, before)
	}
}
