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
