package store

import (
	"context"
	"time"
)

// KeepAliveStore holds the prompt-cache keep-alive sessions: one per
// (principal, conversation), with the sealed snapshot of the cached prompt
// prefix. Background state: no revision, no config generation.
type KeepAliveStore interface {
	// UpsertKeepAliveSession records a new turn of a conversation: a new
	// session, or the next generation of an existing one (turn budget,
	// anchor and snapshot replaced). It returns the stored session.
	UpsertKeepAliveSession(ctx context.Context, s KeepAliveSession) (*KeepAliveSession, error)
	// SetKeepAliveSnapshot stores the sealed snapshot of generation (sealed
	// after the upsert, since the generation is bound into its seal).
	SetKeepAliveSnapshot(ctx context.Context, id string, generation int64, sealed []byte) error
	// GetKeepAliveSession returns a session by id; ErrNotFound when gone.
	GetKeepAliveSession(ctx context.Context, id string) (*KeepAliveSession, error)
	// RecordKeepAliveRefresh counts a refresh of generation that renewed the
	// cache at anchor; false when the session moved on (stale generation).
	RecordKeepAliveRefresh(ctx context.Context, id string, generation int64, anchor, expiresAt time.Time) (bool, error)
	// StopKeepAliveSession ends generation's keep-alive with a reason;
	// false when the session moved on.
	StopKeepAliveSession(ctx context.Context, id string, generation int64, reason string, now time.Time) (bool, error)
	// DeleteExpiredKeepAliveSessions deletes sessions whose cache expired
	// before before (their snapshots with them).
	DeleteExpiredKeepAliveSessions(ctx context.Context, before time.Time) (int64, error)
}

// KeepAliveSession is one conversation's keep-alive state.
type KeepAliveSession struct {
	ID          string
	PrincipalID string
	// SessionHash identifies the conversation (see keepalive.SessionHash).
	SessionHash string
	UpstreamID  string
	Model       string
	// Generation counts the conversation's turns; a refresh job of an older
	// generation is a no-op.
	Generation int64
	TTL        time.Duration
	// TurnStartedAt is the anchor of the turn that started this
	// generation: the total-duration bound counts from it.
	TurnStartedAt time.Time
	// AnchorAt is the response-begin moment of the last renewal.
	AnchorAt time.Time
	// ExpiresAt is when the provider's cache expires without a refresh.
	ExpiresAt time.Time
	Refreshes int64
	// RefreshBudget is how many refreshes this generation may make.
	RefreshBudget int64
	// Snapshot is the sealed refresh request (the cached prefix).
	Snapshot []byte
	// State is "active" or "stopped" (StopReason says why).
	State      string
	StopReason string
	UpdatedAt  time.Time
}
