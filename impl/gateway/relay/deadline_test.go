package relay

import (
	"context"
	"errors"
	"reflect"
	"sync"
	"testing"
	"time"
	"unsafe"
)

// firings records when a lazyTimer ran its function.
type firings struct {
	mu sync.Mutex
	at []int64
	ch chan struct{}
}

func newFirings() *firings { return &firings{ch: make(chan struct{}, 16)} }

func (f *firings) expire() {
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

func startLazy(d time.Duration, on expirer) *lazyTimer {
	l := &lazyTimer{}
	l.start(d, on)
	return l
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
	const d = 100 * time.Millisecond
	// A run in which the machine held this goroutine up for longer than d
	// between two Resets lets the timer fire early, rightly: run again.
	for try := 0; ; try++ {
		f := newFirings()
		tm := startLazy(d, f)
		var last int64
		for range 10 {
			time.Sleep(d / 10) // paces the Resets as reads would
			last = monoNow()
			tm.Reset(d)
		}
		if len(f.times()) > 0 {
			tm.Stop()
			if try < 5 {
				continue
			}
			t.Fatal("fired while Reset postponed it, in every run")
		}
		f.wait(t)
		if got := f.times()[0]; got < last+int64(d) {
			t.Fatalf("fired %v after the last Reset, before its deadline of %v", time.Duration(got-last), d)
		}
		if tm.Stop() {
			t.Fatal("Stop after the timer fired reported it active")
		}
		return
	}
}

// A Reset to sooner than the runtime timer is set for takes effect: the
// header timeout (minutes) replaced by a short idle deadline.
func TestLazyTimerResetSooner(t *testing.T) {
	t.Parallel()
	f := newFirings()
	tm := startLazy(time.Hour, f)
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
	tm := startLazy(5*time.Millisecond, f)
	tm.Reset(10 * time.Millisecond)
	if !tm.Stop() {
		t.Fatal("Stop of an armed timer reported it inactive")
	}
	time.Sleep(50 * time.Millisecond) // past both deadlines
	if n := len(f.times()); n != 0 {
		t.Fatalf("a stopped timer fired %d times", n)
	}
}

// An attempt's own timer (no test substitute) ends its context with the
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
