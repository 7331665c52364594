// Package clock is the one clock services read time and arm timers
// through, so tests drive time with impl/testing/fakeclock instead of
// sleeping.
package clock

import "time"

// Clock is what services need of time. Real is the production one.
type Clock interface {
	Now() time.Time
	// Since is Now().Sub(t); on Real it reads only the monotonic clock.
	Since(t time.Time) time.Duration
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) Timer
	// NewTimer sends the time on the channel once d has passed.
	NewTimer(d time.Duration) (Timer, <-chan time.Time)
}

// Timer is what callers need of a *time.Timer, which implements it.
type Timer interface {
	Reset(d time.Duration) bool
	Stop() bool
}

// Real is the wall and monotonic clock of package time.
type Real struct{}

var _ Clock = Real{}

func (Real) Now() time.Time                  { return time.Now() }
func (Real) Since(t time.Time) time.Duration { return time.Since(t) }

// AfterFunc returns the *time.Timer itself, so arming one costs what
// time.AfterFunc costs.
func (Real) AfterFunc(d time.Duration, f func()) Timer { return time.AfterFunc(d, f) }

func (Real) NewTimer(d time.Duration) (Timer, <-chan time.Time) {
	t := time.NewTimer(d)
	return t, t.C
}

// Or is c, or Real when c is nil.
func Or(c Clock) Clock {
	if c == nil {
		return Real{}
	}
	return c
}
