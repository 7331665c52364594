package relay

import (
	"sync"
	"testing"
	"time"
)

// firings records when a lazyTimer ran its function.
type firings struct {
	mu sync.Mutex
	at []int64
	ch chan struct{}
}

func newFirings() *firings { return &firings{ch: make(chan struct{}, 16)} }

func (f *firings) fire() {
	f.mu.Lock()
	f.at = append(f.at, monoNow())
	f.mu.Unlock()
	f.ch <- struct{}{}
}

func (f *firings) wait(t *testing.T) {
	t.Helper()
	select {
	case <-f.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("the timer did not fire")
	}
}

func (f *firings) times() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.at...)
}

// A Reset to later postpones the function: it never runs before the last
// deadline set (a Reset only records it; the runtime timer catches up).
func TestLazyTimerResetPostpones(t *testing.T) {
	t.Parallel()
	f := newFirings()
	const d = 20 * time.Millisecond
	var last int64
	tm := realAfterFunc(d, f.fire)
	for range 10 {
		time.Sleep(d / 4) // pacing the reads, not waiting for the timer
		last = monoNow()
		tm.Reset(d)
	}
	f.wait(t)
	at := f.times()
	if got := at[len(at)-1]; got < last+int64(d) {
		t.Fatalf("fired %v after the last Reset, before its deadline of %v", time.Duration(got-last), d)
	}
	if tm.Stop() {
		t.Fatal("Stop after the timer fired reported it active")
	}
}

// A Reset to sooner than the runtime timer is set for takes effect: the
// header timeout (minutes) replaced by a short idle deadline.
func TestLazyTimerResetSooner(t *testing.T) {
	t.Parallel()
	f := newFirings()
	tm := realAfterFunc(time.Hour, f.fire)
	if !tm.Reset(time.Millisecond) {
		t.Fatal("Reset of an armed timer reported it inactive")
	}
	f.wait(t)
	// Fired: a Reset arms it again, as time.Timer does.
	if tm.Reset(time.Millisecond) {
		t.Fatal("Reset after firing reported the timer active")
	}
	f.wait(t)
}

// Stop prevents the function from running, also when the runtime timer
// fires late after the deadline was moved.
func TestLazyTimerStop(t *testing.T) {
	t.Parallel()
	f := newFirings()
	tm := realAfterFunc(5*time.Millisecond, f.fire)
	tm.Reset(10 * time.Millisecond)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported it inactive")
	}
	time.Sleep(50 * time.Millisecond) // past both deadlines
	if n := len(f.times()); n != 0 {
		t.Fatalf("a stopped timer fired %d times", n)
	}
}
