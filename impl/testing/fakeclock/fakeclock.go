// Package fakeclock is the settable clock.Clock tests inject into a
// service: time moves, and timers fire, only when the test says so.
package fakeclock

import (
	"sort"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
)

// Start is the instant New starts at when given the zero time: the
// beginning of a minute and of an hour, so window arithmetic is easy to read.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Clock is safe for concurrent use.
type Clock struct {
	mu     sync.Mutex
	t      time.Time
	seq    uint64
	timers []*timer // armed, in no particular order
	reads  chan struct{}
	armed  chan time.Duration
}

var _ clock.Clock = (*Clock)(nil)

// New returns a clock reading start (Start when start is zero).
func New(start time.Time) *Clock {
	if start.IsZero() {
		start = Start
	}
	return &Clock{t: start, reads: make(chan struct{}, 1024), armed: make(chan time.Duration, 1024)}
}

// Now returns the current fake time and announces the reading on Reads.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	t := c.t
	c.mu.Unlock()
	announce(c.reads, struct{}{})
	return t
}

// Since is Now().Sub(t), announced on Reads like Now.
func (c *Clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// AfterFunc arms a timer that calls f, on the goroutine advancing the
// clock, once the clock reached now+d.
func (c *Clock) AfterFunc(d time.Duration, f func()) clock.Timer {
	t := &timer{c: c, f: f}
	t.Reset(d)
	return t
}

// NewTimer arms a timer that sends the fake time on its channel (buffered:
// a firing nobody reads is dropped, as with time.Timer).
func (c *Clock) NewTimer(d time.Duration) (clock.Timer, <-chan time.Time) {
	ch := make(chan time.Time, 1)
	t := &timer{c: c, ch: ch}
	t.Reset(d)
	return t, ch
}

// Advance moves the clock forward by d, firing each timer due on the way
// in the order of its deadline (then of arming), with the clock reading
// that deadline; a timer armed by a callback fires too if it falls due
// within d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.advanceTo(c.t.Add(d))
}

// Set moves the clock to t, firing the timers due by then as Advance does;
// a t in the past fires nothing.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	if t.Before(c.t) {
		c.t = t
		c.mu.Unlock()
		return
	}
	c.advanceTo(t)
}

// advanceTo is called with c.mu held and returns without it.
func (c *Clock) advanceTo(end time.Time) {
	for {
		next := c.due(end)
		if next == nil {
			c.t = end
			c.mu.Unlock()
			return
		}
		c.t = next.when
		c.remove(next)
		now := c.t
		c.mu.Unlock()
		next.fire(now)
		c.mu.Lock()
	}
}

// due is the earliest timer due by end, nil if none.
func (c *Clock) due(end time.Time) *timer {
	var first *timer
	for _, t := range c.timers {
		if t.when.After(end) {
			continue
		}
		if first == nil || t.when.Before(first.when) || (t.when.Equal(first.when) && t.seq < first.seq) {
			first = t
		}
	}
	return first
}

func (c *Clock) remove(t *timer) bool {
	for i, x := range c.timers {
		if x == t {
			c.timers = append(c.timers[:i], c.timers[i+1:]...)
			return true
		}
	}
	return false
}

// Pending is the delays until the armed timers' deadlines, soonest first.
func (c *Clock) Pending() []time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	ds := make([]time.Duration, 0, len(c.timers))
	for _, t := range c.timers {
		ds = append(ds, t.when.Sub(c.t))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds
}

// Reads receives once per Now or Since call (buffered, dropped when full),
// so a test can wait until the code under test has taken its reading
// instead of sleeping.
func (c *Clock) Reads() <-chan struct{} { return c.reads }

// Armed receives the delay of each timer armed or re-armed (AfterFunc,
// NewTimer, Reset; buffered, dropped when full), so a test can wait until
// the code under test is waiting on the clock before advancing it.
func (c *Clock) Armed() <-chan time.Duration { return c.armed }

func announce[T any](ch chan T, v T) {
	select {
	case ch <- v:
	default: // nobody is listening; the buffer is full
	}
}

type timer struct {
	c    *Clock
	f    func()
	ch   chan time.Time
	when time.Time
	seq  uint64
}

func (t *timer) Reset(d time.Duration) bool {
	c := t.c
	c.mu.Lock()
	was := c.remove(t)
	c.seq++
	t.when, t.seq = c.t.Add(d), c.seq
	c.timers = append(c.timers, t)
	c.mu.Unlock()
	announce(c.armed, d)
	return was
}

func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	return t.c.remove(t)
}

func (t *timer) fire(now time.Time) {
	if t.f != nil {
		t.f()
		return
	}
	select {
	case t.ch <- now:
	default:
	}
}
