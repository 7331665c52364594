package affinity

import (
	"sync"
	"sync/atomic"
	"time"
)

// IdleWindow is how long a session is remembered after its last request.
// Past it the provider's prompt cache of the session has expired (its
// longest time to live is an hour), so keeping the session where it was
// saves nothing: it is chosen afresh.
const IdleWindow = time.Hour

// touchEvery is how often the stored record of a moved session in use is
// refreshed, so the other replicas (and one that starts) keep reading it
// while the session lasts.
const touchEvery = 5 * time.Minute

const shards = 64

// Table is a replica's sessions: where each went last, and whether that
// was a move away from the rendezvous choice (only moves are shared).
// Reads on the request path take one shard's read lock and allocate
// nothing; a session's first request allocates its entry.
type Table struct {
	shards [shards]shard
	moves  atomic.Int64 // moves made here since start (metrics)

	mu      sync.Mutex
	pending map[Key]Binding // moves made or touched here, not stored yet
}

// entry is one session. Its fields change under the shard's lock; used
// is atomic so a request marks its session without the write lock.
type entry struct {
	upstream string
	moved    bool
	at       int64 // unix ms of the move (or of learning it)
	stored   int64 // unix ms when this replica last queued it for storing
	used     atomic.Int64
}

// Binding is a session recorded on an upstream by a move.
type Binding struct {
	Session  Key
	Upstream string
	At       time.Time // when the move was made or last confirmed in use
}

// NewTable returns an empty table.
func NewTable() *Table {
	t := &Table{pending: map[Key]Binding{}}
	for i := range t.shards {
		t.shards[i].m = map[Key]*entry{}
	}
	return t
}

// shard is one part of the sessions, locked on its own so requests of
// different sessions rarely wait on each other.
type shard struct {
	mu sync.RWMutex
	m  map[Key]*entry
}

func (t *Table) shard(k Key) *shard { return &t.shards[k[0]%shards] }

// Moved returns the upstream session k was moved to, if it was.
func (t *Table) Moved(k Key) (string, bool) {
	if t == nil || k.IsZero() {
		return "", false
	}
	s := t.shard(k)
	s.mu.RLock()
	e := s.m[k]
	var up string
	moved := false
	if e != nil && e.moved {
		up, moved = e.upstream, true
	}
	s.mu.RUnlock()
	return up, moved
}

// Land records that a request of session k went to upstream, where the
// rendezvous choice (no move considered) was natural. A session that
// lands elsewhere than where it was bound, or away from its natural
// upstream when it was bound nowhere, has moved: the move is kept for the
// session's next requests and queued for the other replicas. It reports
// whether this was a move.
func (t *Table) Land(k Key, upstream, natural string, now time.Time) bool {
	if t == nil || k.IsZero() || upstream == "" {
		return false
	}
	ms := now.UnixMilli()
	s := t.shard(k)
	s.mu.RLock()
	e := s.m[k]
	if e != nil && e.upstream == upstream {
		e.used.Store(ms)
		touch := e.moved && ms-e.stored >= touchEvery.Milliseconds()
		s.mu.RUnlock()
		if touch {
			t.queue(k, upstream, ms, s)
		}
		return false
	}
	s.mu.RUnlock()

	s.mu.Lock()
	e = s.m[k]
	moved := false
	switch {
	case e == nil:
		e = &entry{upstream: upstream}
		s.m[k] = e
		moved = upstream != natural
	case e.upstream != upstream:
		e.upstream = upstream
		moved = true
	}
	e.used.Store(ms)
	if moved {
		e.moved, e.at = true, ms
	}
	s.mu.Unlock()
	if moved {
		t.moves.Add(1)
		t.queue(k, upstream, ms, s)
	}
	return moved
}

// queue marks the session's move for the next Drain.
func (t *Table) queue(k Key, upstream string, ms int64, s *shard) {
	s.mu.Lock()
	if e := s.m[k]; e != nil {
		e.stored = ms
	}
	s.mu.Unlock()
	t.mu.Lock()
	t.pending[k] = Binding{Session: k, Upstream: upstream, At: time.UnixMilli(ms)}
	t.mu.Unlock()
}

// Drain returns the moves to store and forgets them; Requeue puts back
// those a failed store could not take.
func (t *Table) Drain() []Binding {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.pending) == 0 {
		return nil
	}
	out := make([]Binding, 0, len(t.pending))
	for _, b := range t.pending {
		out = append(out, b)
	}
	t.pending = map[Key]Binding{}
	return out
}

// Requeue keeps bindings for the next Drain (unless a newer one is queued).
func (t *Table) Requeue(bs []Binding) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, b := range bs {
		if cur, ok := t.pending[b.Session]; !ok || cur.At.Before(b.At) {
			t.pending[b.Session] = b
		}
	}
}

// Learn records a move another replica stored. An older record than what
// this replica knows of the session changes nothing.
func (t *Table) Learn(b Binding) {
	ms := b.At.UnixMilli()
	s := t.shard(b.Session)
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.m[b.Session]
	if e == nil {
		e = &entry{}
		s.m[b.Session] = e
	} else if e.moved && e.at > ms || !e.moved && e.used.Load() > ms {
		return
	}
	e.upstream, e.moved, e.at, e.stored = b.Upstream, true, ms, ms
	if e.used.Load() < ms {
		e.used.Store(ms)
	}
}

// Sweep forgets the sessions idle for longer than IdleWindow at now.
func (t *Table) Sweep(now time.Time) {
	cutoff := now.Add(-IdleWindow).UnixMilli()
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		for k, e := range s.m {
			if e.used.Load() < cutoff {
				delete(s.m, k)
			}
		}
		s.mu.Unlock()
	}
}

// Bound counts, per upstream, the sessions this replica saw land there
// within IdleWindow of now.
func (t *Table) Bound(now time.Time) map[string]int {
	out := map[string]int{}
	if t == nil {
		return out
	}
	cutoff := now.Add(-IdleWindow).UnixMilli()
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.RLock()
		for _, e := range s.m {
			if e.used.Load() >= cutoff {
				out[e.upstream]++
			}
		}
		s.mu.RUnlock()
	}
	return out
}

// Moves is how many moves this replica made since it started.
func (t *Table) Moves() int64 {
	if t == nil {
		return 0
	}
	return t.moves.Load()
}
