package store

import (
	"context"
	"time"
)

// LimitStore holds the shared windows of principals' default_limits.
// Background state: no revision, no config generation.
type LimitStore interface {
	// SyncLimitWindows adds each delta's Count to its window (creating it),
	// deletes windows that expired at now (Start + 2×WindowSecs), and
	// returns every live window with its total, in one transaction.
	SyncLimitWindows(ctx context.Context, deltas []LimitWindow, now time.Time) ([]LimitWindow, error)
}

// LimitWindow is one principal's count of one kind ("requests" or "tokens")
// in one window of WindowSecs starting at Start (Unix seconds, a multiple
// of WindowSecs). It outlives its window by one window: the sliding
// estimate of the next window reads it.
type LimitWindow struct {
	PrincipalID string
	Kind        string
	WindowSecs  int64
	Start       int64
	Count       int64
}
