// Package waitfor polls a condition until it holds, bounded by a context or
// a timeout, for tests that wait on something another goroutine or process
// does: one copy of the loop, with a failure that says what was awaited and
// the condition's last state.
package waitfor

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// Timeout bounds Until and True; long enough for a loaded 2-core machine,
// short enough that a stuck condition fails the test rather than the run.
const Timeout = 30 * time.Second

// Interval is the pause between two polls of Until and True.
const Interval = 5 * time.Millisecond

// Poll calls cond until it returns nil, pausing interval between calls. When
// ctx ends first it returns ctx's error wrapped with cond's last error.
func Poll(ctx context.Context, interval time.Duration, cond func() error) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		err := cond()
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w; last: %w", ctx.Err(), err)
		case <-t.C:
		}
	}
}

// UntilContext polls cond until it returns nil and fails tb when ctx ends
// first, naming what was awaited and cond's last error.
func UntilContext(ctx context.Context, tb testing.TB, what string, cond func() error) {
	tb.Helper()
	if err := Poll(ctx, Interval, cond); err != nil {
		tb.Fatalf("waiting for %s: %v", what, err)
	}
}

// Until is UntilContext bounded by Timeout.
func Until(tb testing.TB, what string, cond func() error) {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), Timeout)
	defer cancel()
	UntilContext(ctx, tb, what, cond)
}

// True is Until for a condition with no state worth reporting.
func True(tb testing.TB, what string, cond func() bool) {
	tb.Helper()
	Until(tb, what, func() error {
		if cond() {
			return nil
		}
		return errNotYet
	})
}

var errNotYet = fmt.Errorf("not yet")
