package relay

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
	"unsafe"

	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// firings records when, on its clock, a lazyTimer ran its function.
type firings struct {
	m  *mono
	at []time.Duration
}

func (f *firings) expire() { f.at = append(f.at, time.Duration(f.m.now())) }

// startLazy arms a lazyTimer on a fake clock; the clock's Advance runs the
// timer's function on the test's goroutine.
func startLazy(d time.Duration) (*lazyTimer, *firings, *fakeclock.Clock) {
	c := fakeclock.New(time.Time{})
	f := &firings{m: &mono{clk: c, base: c.Now()}}
	l := &lazyTimer{}
	l.start(f.m, d, f)
	return l, f, c
}

// A Reset to later postpones the function: it never runs before the last
// deadline set (a Reset only records it; the clock's timer catches up).
func TestLazyTimerResetPostpones(t *testing.T) {
	t.Parallel()
	const d = 100 * time.Millisecond
	tm, f, c := startLazy(d)
	for range 10 {
		c.Advance(d / 10) // paces the Resets as reads would
		if !tm.Reset(d) {
			t.Fatal("Reset of an armed timer reported it inactive")
		}
	}
	c.Advance(d - time.Nanosecond)
	if len(f.at) != 0 {
		t.Fatalf("fired at %v, before the last Reset's deadline", f.at)
	}
	c.Advance(time.Nanosecond)
	if want := 2 * d; len(f.at) != 1 || f.at[0] != want {
		t.Fatalf("fired at %v, want once at %v", f.at, want)
	}
	if tm.Stop() {
		t.Fatal("Stop after the timer fired reported it active")
	}
}

// A Reset to sooner than the clock's timer is set for takes effect: the
// header timeout (minutes) replaced by a short idle deadline.
func TestLazyTimerResetSooner(t *testing.T) {
	t.Parallel()
	tm, f, c := startLazy(time.Hour)
	if !tm.Reset(time.Millisecond) {
		t.Fatal("Reset of an armed timer reported it inactive")
	}
	c.Advance(time.Millisecond)
	if len(f.at) != 1 || f.at[0] != time.Millisecond {
		t.Fatalf("fired at %v, want once at 1ms", f.at)
	}
	// Fired: a Reset arms it again, as time.Timer does.
	if tm.Reset(time.Millisecond) {
		t.Fatal("Reset after firing reported the timer active")
	}
	c.Advance(time.Millisecond)
	if len(f.at) != 2 {
		t.Fatalf("fired %d times, want 2", len(f.at))
	}
}

// Stop prevents the function from running, also when the clock's timer
// comes due after the deadline was moved.
func TestLazyTimerStop(t *testing.T) {
	t.Parallel()
	tm, f, c := startLazy(5 * time.Millisecond)
	tm.Reset(10 * time.Millisecond)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported it inactive")
	}
	c.Advance(time.Hour) // past both deadlines
	if n := len(f.at); n != 0 {
		t.Fatalf("a stopped timer fired %d times", n)
	}
}

// On the fake clock an attempt's deadline ends its context with the cause
// of the phase it is in exactly when due: headers, then idle.
func TestAttemptDeadlineOnTheClock(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	h := New(Options{Clock: c, IdleTimeout: 5 * time.Second})
	a := h.newAttempt(context.Background(), time.Minute)
	c.Advance(time.Minute - time.Nanosecond)
	if a.cause() != nil {
		t.Fatalf("ended before the header timeout: %v", a.cause())
	}
	c.Advance(time.Nanosecond)
	if got := a.cause(); !errors.Is(got, errHeaderTimeout) {
		t.Fatalf("cause %v, want the header timeout", got)
	}
	a.done()

	b := h.newAttempt(context.Background(), time.Hour)
	b.headersIn()
	c.Advance(4 * time.Second)
	b.progress() // a read re-arms the idle deadline
	c.Advance(5*time.Second - time.Nanosecond)
	if b.cause() != nil {
		t.Fatalf("ended before the idle deadline after the last read: %v", b.cause())
	}
	c.Advance(time.Nanosecond)
	if got := b.cause(); !errors.Is(got, errUpstreamIdle) {
		t.Fatalf("cause %v, want the idle deadline", got)
	}
	b.done()
}

// On the real clock an attempt's own timer ends its context with the
// cause of the phase it is in: headers, then idle once headers arrived.
func TestAttemptDeadlineCauses(t *testing.T) {
	t.Parallel()
	h := New(Options{IdleTimeout: 5 * time.Millisecond})
	waitCause := func(a *attempt, want error) {
		t.Helper()
		select {
		case <-a.ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("the attempt's deadline did not end its context")
		}
		if got := a.cause(); !errors.Is(got, want) {
			t.Fatalf("cause %v, want %v", got, want)
		}
	}
	a := h.newAttempt(context.Background(), 5*time.Millisecond)
	waitCause(a, errHeaderTimeout)
	a.done()

	// Headers in: the hour-long header timeout gives way to the idle one.
	b := h.newAttempt(context.Background(), time.Hour)
	b.headersIn()
	b.progress()
	waitCause(b, errUpstreamIdle)
	b.done()
}

// The held-bytes counter, written twice by every request, shares no cache
// line with the Handler's other fields, which every request reads: at any
// alignment, at least a line's worth of padding lies on either side.
func TestHeldBytesOnItsOwnCacheLine(t *testing.T) {
	t.Parallel()
	const line = 64
	var h Handler
	held := unsafe.Offsetof(h.held)
	end := held + unsafe.Sizeof(h.held)
	ht := reflect.TypeOf((*Handler)(nil)).Elem()
	for i := range ht.NumField() {
		f := ht.Field(i)
		if f.Name == "held" || f.Name == "_" {
			continue
		}
		if fEnd := f.Offset + f.Type.Size(); fEnd+line > held && f.Offset < end+line {
			t.Errorf("field %s at [%d, %d) is within a line of held at [%d, %d)", f.Name, f.Offset, fEnd, held, end)
		}
	}
	if unsafe.Sizeof(h)-end < line {
		t.Errorf("%d bytes after held: the next object could share its line", unsafe.Sizeof(h)-end)
	}
}
