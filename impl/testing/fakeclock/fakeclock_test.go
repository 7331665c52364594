package fakeclock_test

import (
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

func TestClockMovesOnlyWhenTold(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	if !c.Now().Equal(fakeclock.Start) {
		t.Fatalf("zero start reads %v, want %v", c.Now(), fakeclock.Start)
	}
	c.Advance(90 * time.Second)
	if want := fakeclock.Start.Add(90 * time.Second); !c.Now().Equal(want) {
		t.Fatalf("after Advance %v, want %v", c.Now(), want)
	}
	at := time.Unix(1_000_000, 0)
	c.Set(at)
	if !c.Now().Equal(at) {
		t.Fatalf("after Set %v, want %v", c.Now(), at)
	}
}

func TestReadsAnnouncesEachReading(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Unix(5, 0))
	select {
	case <-c.Reads():
		t.Fatal("a reading announced before any Now call")
	default:
	}
	c.Now()
	select {
	case <-c.Reads():
	default:
		t.Fatal("Now was not announced")
	}
	// More readings than the buffer holds never block the reader.
	for range 2000 {
		c.Now()
	}
}

// Advance fires the timers due on the way in deadline order, each with the
// clock at its deadline, and leaves the later ones armed.
func TestAdvanceFiresTimersInOrder(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	var fired []time.Duration
	at := func(d time.Duration) func() {
		return func() {
			if got := c.Since(fakeclock.Start); got != d {
				t.Errorf("timer of %v fired with the clock at +%v", d, got)
			}
			fired = append(fired, d)
		}
	}
	c.AfterFunc(3*time.Second, at(3*time.Second))
	c.AfterFunc(time.Second, at(time.Second))
	late := c.AfterFunc(time.Minute, at(time.Minute))
	c.AfterFunc(2*time.Second, at(2*time.Second))
	c.Advance(2 * time.Second)
	c.Advance(2 * time.Second)
	want := []time.Duration{time.Second, 2 * time.Second, 3 * time.Second}
	if len(fired) != len(want) || fired[0] != want[0] || fired[1] != want[1] || fired[2] != want[2] {
		t.Fatalf("fired %v, want %v", fired, want)
	}
	if p := c.Pending(); len(p) != 1 || p[0] != 56*time.Second {
		t.Fatalf("pending %v, want [56s]", p)
	}
	if !late.Stop() {
		t.Fatal("Stop of an armed timer reported it was not armed")
	}
	c.Advance(time.Hour)
	if len(fired) != 3 {
		t.Fatalf("a stopped timer fired: %v", fired)
	}
}

// A timer re-armed by its own callback fires again within the same Advance
// when its new deadline falls inside it; Reset moves a deadline.
func TestTimerRearmedWithinAdvance(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	n := 0
	var tm interface{ Reset(time.Duration) bool }
	tm = c.AfterFunc(time.Second, func() { n++; tm.Reset(time.Second) })
	c.Advance(3500 * time.Millisecond)
	if n != 3 {
		t.Fatalf("fired %d times in 3.5s, want 3", n)
	}
	if !tm.Reset(10 * time.Second) {
		t.Fatal("Reset of an armed timer reported it was not armed")
	}
	if d := <-c.Armed(); d != time.Second {
		t.Fatalf("first arming announced %v", d)
	}
	c.Advance(9 * time.Second)
	if n != 3 {
		t.Fatalf("fired after Reset moved the deadline later: %d", n)
	}
	c.Advance(time.Second)
	if n != 4 {
		t.Fatalf("fired %d times, want 4", n)
	}
}

// NewTimer sends the fake time on its channel once due, and never blocks
// the clock when nobody reads it.
func TestNewTimerSendsDeadline(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	tm, ch := c.NewTimer(time.Minute)
	c.Advance(59 * time.Second)
	select {
	case <-ch:
		t.Fatal("fired early")
	default:
	}
	c.Advance(2 * time.Second)
	if got := <-ch; !got.Equal(fakeclock.Start.Add(time.Minute)) {
		t.Fatalf("sent %v, want the deadline", got)
	}
	tm.Reset(time.Second)
	c.Advance(time.Second)
	tm.Reset(time.Second)
	c.Advance(time.Second) // the channel is full: dropped, not blocked
	if tm.Stop() {
		t.Fatal("a fired timer reported armed")
	}
	// Set to an earlier instant moves the clock back and fires nothing.
	c.Set(fakeclock.Start)
	if !c.Now().Equal(fakeclock.Start) {
		t.Fatalf("Set back reads %v", c.Now())
	}
}
