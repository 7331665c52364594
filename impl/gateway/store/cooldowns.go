package store

import (
	"context"
	"time"
)

// CooldownStore shares the upstreams' 429/529 cooldowns between replicas
// (package routing). Background state: no revision, no config generation.
type CooldownStore interface {
	// SyncCooldowns stores the cooldowns a replica learnt, by upstream id
	// (a stored cooldown only extends), forgets those over at now, and
	// returns every cooldown still running, in one transaction.
	SyncCooldowns(ctx context.Context, learnt map[string]time.Time, now time.Time) (map[string]time.Time, error)
}

// AffinityStore shares the sessions the router moved between replicas
// (package affinity). Background state: no revision, no config generation.
type AffinityStore interface {
	// SyncAffinity stores moves (a newer record of a session replaces an
	// older one, an older one changes nothing) and returns every record
	// at or after since, in one transaction.
	SyncAffinity(ctx context.Context, moves []SessionMove, since time.Time) ([]SessionMove, error)
	// ListQuotaWindows returns the polled 5-hour and 7-day windows of every
	// upstream that has an observation, by upstream id (the router's usage
	// thresholds).
	ListQuotaWindows(ctx context.Context) (map[string]QuotaWindows, error)
}

// SessionMove records that a session was moved to an upstream.
type SessionMove struct {
	// SessionKey is the session's digest in hex (affinity.Key).
	SessionKey string
	UpstreamID string
	// At is when the move was made or last confirmed in use (ms precision).
	At time.Time
}

// QuotaWindows are an upstream's polled usage windows.
type QuotaWindows struct {
	FiveHour, SevenDay QuotaWindow
}
