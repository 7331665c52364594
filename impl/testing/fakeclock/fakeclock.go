// Package fakeclock is the settable clock tests inject wherever a service
// takes a now function: time moves only when the test says so.
package fakeclock

import (
	"sync"
	"time"
)

// Start is the instant New starts at when given the zero time: the
// beginning of a minute and of an hour, so window arithmetic is easy to read.
var Start = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// Clock is safe for concurrent use.
type Clock struct {
	mu    sync.Mutex
	t     time.Time
	reads chan struct{}
}

// New returns a clock reading start (Start when start is zero).
func New(start time.Time) *Clock {
	if start.IsZero() {
		start = Start
	}
	return &Clock{t: start, reads: make(chan struct{}, 1024)}
}

// Now returns the current fake time and announces the reading on Reads.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	t := c.t
	c.mu.Unlock()
	select {
	case c.reads <- struct{}{}:
	default: // nobody is counting readings; the buffer is full
	}
	return t
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.mu.Lock(); c.t = t; c.mu.Unlock() }

// Reads receives once per Now call (buffered, dropped when full), so a test
// can wait until the code under test has taken its reading instead of
// sleeping.
func (c *Clock) Reads() <-chan struct{} { return c.reads }
