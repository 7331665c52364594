package routing

import (
	"context"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// CooldownStore is where replicas share cooldowns (store.CooldownStore)
// and read the polled usage windows (store.AffinityStore).
type CooldownStore interface {
	SyncCooldowns(ctx context.Context, learnt map[string]time.Time, now time.Time) (map[string]time.Time, error)
	ListQuotaWindows(ctx context.Context) (map[string]store.QuotaWindows, error)
}

// DefaultShareInterval is how often a Sharer syncs with the database.
const DefaultShareInterval = time.Second

// Sharer shares a board's cooldowns between replicas: the cooldowns this
// replica learns from its own 429/529 answers are stored, and every
// replica's are read back into the board, once a second. A replica that
// has not read a cooldown yet sends at most the requests of that second to
// the upstream and learns it from the provider's answer itself; the client
// does not see it (the request fails over before its first byte).
type Sharer struct {
	service.Base
	board *Board
	st    CooldownStore

	mu      sync.Mutex
	pending map[string]time.Time // learnt here, not stored yet
}

// NewSharer returns a sharer and the board it shares.
func NewSharer(st CooldownStore, o service.Options) *Sharer {
	s := service.Init(o, &Sharer{st: st, pending: map[string]time.Time{}})
	s.board = NewBoard(s.note)
	return s
}

// Board is the board the sharer feeds.
func (s *Sharer) Board() *Board { return s.board }

// note keeps a cooldown for the next sync; it never blocks on the database.
func (s *Sharer) note(id string, until time.Time) {
	s.mu.Lock()
	if until.After(s.pending[id]) {
		s.pending[id] = until
	}
	s.mu.Unlock()
}

// Sync stores the pending cooldowns and learns every replica's. On a
// failure the pending ones are kept for the next attempt.
func (s *Sharer) Sync(ctx context.Context) error {
	s.mu.Lock()
	learnt := s.pending
	s.pending = map[string]time.Time{}
	s.mu.Unlock()
	all, err := s.st.SyncCooldowns(ctx, learnt, s.Clock.Now())
	if err != nil {
		for id, until := range learnt {
			s.note(id, until)
		}
		s.Logger.Warn("sharing upstream cooldowns failed; retrying", "error", err)
		return err
	}
	for id, until := range all {
		s.board.Learn(id, until)
	}
	// The usage poll runs on one replica; every replica reads its
	// windows here for the usage thresholds.
	wins, err := s.st.ListQuotaWindows(ctx)
	if err != nil {
		s.Logger.Warn("reading the polled usage windows failed; retrying", "error", err)
		return err
	}
	for id, w := range wins {
		s.board.SetUsage(id, w)
	}
	return nil
}

// Run syncs every interval until ctx ends.
func (s *Sharer) Run(ctx context.Context, interval time.Duration) {
	service.Every(ctx, s.Clock, interval, func(ctx context.Context) { _ = s.Sync(ctx) }) // Sync logs its own failures
}
