package store

import (
	"context"
	"time"
)

// EventQuery selects request events for the request log (dashboard and
// GET /admin/v1/request-log). Zero fields do not filter.
type EventQuery struct {
	PrincipalID string
	Model       string
	// StatusMin and StatusMax bound the HTTP status, inclusive; 0 is no bound.
	StatusMin, StatusMax int
	// Since is inclusive, Until exclusive; zero times do not bound.
	Since, Until time.Time
	// After continues a listing: only events strictly older than this
	// (At, ID) position, in the listing's newest-first order (keyset paging).
	After *EventPosition
	// Limit caps the result; at most 1000, default 100.
	Limit int
}

// EventPosition is the (At, ID) of the last event of a page.
type EventPosition struct {
	At time.Time
	ID string
}

// EventReader is the read side of request events used by the operator's
// views: a filtered, keyset-paged listing and a read-time aggregation of
// the hours the usage_rollup job has not rolled up yet.
type EventReader interface {
	// SearchRequestEvents returns matching events newest first (At, then ID
	// descending).
	SearchRequestEvents(ctx context.Context, q EventQuery) ([]RequestEvent, error)
	// AggregateRequestEvents computes, at read time, the hourly usage of
	// events in [from, to), grouped like the usage rollups, oldest first.
	AggregateRequestEvents(ctx context.Context, from, to time.Time) ([]UsageRollup, error)
}

// UsageQuery selects the usage totals of GET /admin/v1/usage.
type UsageQuery struct {
	// From is inclusive, To exclusive.
	From, To time.Time
	// LiveFrom is where the rolled-up hours end: whole hours in
	// [From, min(To, LiveFrom)) are read from the key rollups, the rest of
	// the range from the request events.
	LiveFrom time.Time
	// GroupBy names the dimensions, any of UsageDimensions; none gives one
	// total.
	GroupBy []string
}

// UsageDimensions are what usage can be grouped by.
var UsageDimensions = []string{"principal", "key", "upstream", "model"}

// UsageTotal is the usage of one group; the dimensions not grouped by are
// empty.
type UsageTotal struct {
	PrincipalID, KeyID, UpstreamID, Model string
	UsageCounts
}

// UsageReader sums usage over a time range.
type UsageReader interface {
	// SumUsage returns one total per group, ordered by the grouped
	// dimensions; groups without requests are absent.
	SumUsage(ctx context.Context, q UsageQuery) ([]UsageTotal, error)
}
