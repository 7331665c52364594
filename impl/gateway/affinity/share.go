package affinity

import (
	"context"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Store is where replicas share session moves (store.AffinityStore).
type Store interface {
	// SyncAffinity stores moves (a newer record of a session replaces an
	// older one) and returns every record stored at or after since.
	SyncAffinity(ctx context.Context, moves []store.SessionMove, since time.Time) ([]store.SessionMove, error)
}

// DefaultShareInterval is how often a Sharer syncs with the database.
const DefaultShareInterval = time.Second

// readOverlap is how far before the previous read the next one starts, so
// a record written with a clock slightly behind this replica's is still
// read.
const readOverlap = 10 * time.Second

// Sharer shares a table's moves between replicas once a second, like the
// cooldowns (routing.Sharer): a replica that has not read a move yet
// chooses the same upstream anyway whenever it sees the same upstreams
// usable, because the choice is the rendezvous order.
type Sharer struct {
	service.Base
	table *Table
	st    Store
	since time.Time
}

// NewSharer returns a sharer of table. The first Sync reads the moves of
// the sessions still remembered (IdleWindow).
func NewSharer(table *Table, st Store, o service.Options) *Sharer {
	return service.Init(o, &Sharer{table: table, st: st})
}

// Sync stores the pending moves, learns every replica's new ones and
// forgets idle sessions. On a failure the pending moves are kept.
func (s *Sharer) Sync(ctx context.Context) error {
	now := s.Clock.Now()
	since := s.since
	if since.IsZero() {
		since = now.Add(-IdleWindow)
	}
	moves := s.table.Drain()
	rows := make([]store.SessionMove, len(moves))
	for i, b := range moves {
		rows[i] = store.SessionMove{SessionKey: b.Session.String(), UpstreamID: b.Upstream, At: b.At}
	}
	got, err := s.st.SyncAffinity(ctx, rows, since)
	if err != nil {
		s.table.Requeue(moves)
		s.Logger.Warn("sharing session affinity failed; retrying", "error", err)
		return err
	}
	for _, r := range got {
		if k, ok := ParseKey(r.SessionKey); ok {
			s.table.Learn(Binding{Session: k, Upstream: r.UpstreamID, At: r.At})
		}
	}
	s.since = now.Add(-readOverlap)
	s.table.Sweep(now)
	return nil
}

// Run syncs every interval until ctx ends.
func (s *Sharer) Run(ctx context.Context, interval time.Duration) {
	service.Every(ctx, s.Clock, interval, func(ctx context.Context) { _ = s.Sync(ctx) }) // Sync logs its own failures
}
