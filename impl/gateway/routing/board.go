// Package routing keeps the live state the built-in router chooses by: which
// upstreams are cooling down after a rate limit, and until when, and how many
// requests each has in flight. It lives beside the configuration snapshot
// (which is rebuilt on every change) and outlives it.
package routing

import (
	"sync"
	"sync/atomic"
	"time"
)

// Board is the live routing state of every upstream this replica has seen.
// Reads on the request path take no lock and allocate nothing: the table
// is an immutable map behind an atomic pointer, replaced (copied) only when
// an upstream is seen for the first time.
type Board struct {
	mu    sync.Mutex // serialises table replacements
	table atomic.Pointer[map[string]*State]
	// onCooldown, when set, is told of every cooldown that begins or
	// extends (persisted for the other replicas and the admin API). It is
	// called on the request path: it must not block.
	onCooldown func(id string, until time.Time)
}

// State is one upstream's live state.
type State struct {
	cooldownUntil atomic.Int64 // unix nanoseconds; 0: none
	inFlight      atomic.Int64
	// The polled usage windows (usage thresholds, admin status).
	fiveHour, sevenDay usageWindow
}

// NewBoard returns an empty board. onCooldown may be nil.
func NewBoard(onCooldown func(id string, until time.Time)) *Board {
	b := &Board{onCooldown: onCooldown}
	m := map[string]*State{}
	b.table.Store(&m)
	return b
}

// lookup returns id's state, nil when the board has none.
func (b *Board) lookup(id string) *State {
	if b == nil {
		return nil
	}
	return (*b.table.Load())[id]
}

// State returns id's state, creating it on first use.
func (b *Board) State(id string) *State {
	if s := b.lookup(id); s != nil {
		return s
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	old := *b.table.Load()
	if s := old[id]; s != nil {
		return s
	}
	m := make(map[string]*State, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	s := &State{}
	m[id] = s
	b.table.Store(&m)
	return s
}

// CoolingUntil reports whether id is cooling down at now, and until when.
func (b *Board) CoolingUntil(id string, now time.Time) (time.Time, bool) {
	s := b.lookup(id)
	if s == nil {
		return time.Time{}, false
	}
	u := s.cooldownUntil.Load()
	if u == 0 || u <= now.UnixNano() {
		return time.Time{}, false
	}
	return time.Unix(0, u), true
}

// CoolDown takes id out of routing until until. A cooldown only ever
// extends: a shorter one learnt later (another limit's reset) does not
// bring the upstream back early. It reports whether the cooldown changed.
func (b *Board) CoolDown(id string, until time.Time) bool {
	if b == nil {
		return false
	}
	s := b.State(id)
	n := until.UnixNano()
	for {
		cur := s.cooldownUntil.Load()
		if cur >= n {
			return false
		}
		if s.cooldownUntil.CompareAndSwap(cur, n) {
			break
		}
	}
	if b.onCooldown != nil {
		b.onCooldown(id, until)
	}
	return true
}

// Learn records a cooldown another replica (or a previous run) stored,
// without reporting it back through onCooldown.
func (b *Board) Learn(id string, until time.Time) {
	s := b.State(id)
	n := until.UnixNano()
	for {
		cur := s.cooldownUntil.Load()
		if cur >= n || s.cooldownUntil.CompareAndSwap(cur, n) {
			return
		}
	}
}

// Begin counts a request in flight on id; the caller calls End when the
// request is done.
func (b *Board) Begin(id string) *State {
	if b == nil {
		return nil
	}
	s := b.State(id)
	s.inFlight.Add(1)
	return s
}

// End ends a request Begin counted.
func (s *State) End() {
	if s != nil {
		s.inFlight.Add(-1)
	}
}

// Snapshot is an upstream's live state at one moment (admin status, metrics).
type Snapshot struct {
	CooldownUntil time.Time // zero: not cooling down at the moment read
	InFlight      int64
	// FiveHour and SevenDay are the polled utilisation in percent (0 when
	// unknown or reset since).
	FiveHour, SevenDay float64
}

// Read returns id's live state at now.
func (b *Board) Read(id string, now time.Time) Snapshot {
	var out Snapshot
	s := b.lookup(id)
	if s == nil {
		return out
	}
	if u := s.cooldownUntil.Load(); u > now.UnixNano() {
		out.CooldownUntil = time.Unix(0, u)
	}
	out.InFlight = s.inFlight.Load()
	out.FiveHour, out.SevenDay = s.fiveHour.at(now), s.sevenDay.at(now)
	return out
}
