package admission

import (
	"context"
	"errors"
	"runtime"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// waitQueued yields until principal p has n requests queued.
func waitQueued(c *Controller, p string, n int) {
	for {
		if _, q := c.State(p); q == n {
			return
		}
		runtime.Gosched()
	}
}

// A burst of 20 from one principal with a cap of 4 is served in full, at
// most 4 at a time, in arrival order, without a refusal: a client that fans
// out is served in turn rather than rate limited.
func TestBurstIsServedInArrivalOrderWithinTheCap(t *testing.T) {
	t.Parallel()
	c := New(Options{QueueLength: 32})
	ctx := context.Background()
	type grant struct {
		i  int
		tk Ticket
	}
	admitted := make(chan grant, 20)
	var first [4]Ticket
	for i := range 4 {
		tk, err := c.Admit(ctx, "p", 4)
		if err != nil {
			t.Fatal(err)
		}
		first[i] = tk
	}
	errs := make(chan error, 16)
	for i := 4; i < 20; i++ {
		go func() {
			tk, err := c.Admit(ctx, "p", 4)
			if err != nil {
				errs <- err
				return
			}
			admitted <- grant{i, tk}
		}()
		waitQueued(c, "p", i-3) // one at a time: the arrival order is known
	}
	if in, q := c.State("p"); in != 4 || q != 16 || c.Queued() != 16 {
		t.Fatalf("in flight %d, queued %d (total %d)", in, q, c.Queued())
	}
	// One slot turns over at a time: each release admits the next in line.
	first[0].Release()
	for want := 4; want < 20; want++ {
		select {
		case g := <-admitted:
			if g.i != want {
				t.Fatalf("request %d admitted, want %d (arrival order)", g.i, want)
			}
			if in, _ := c.State("p"); in != 4 {
				t.Fatalf("%d in flight, want the cap of 4 held", in)
			}
			g.tk.Release()
		case err := <-errs:
			t.Fatalf("a queued request was refused: %v", err)
		}
	}
	for _, tk := range first[1:] {
		tk.Release()
	}
	if in, q := c.State("p"); in != 0 || q != 0 {
		t.Fatalf("after the burst: in flight %d, queued %d", in, q)
	}
}

// A full queue refuses at once, with a retry-after estimated from how
// long slots are held; another principal is not affected.
func TestFullQueueRefusesWithAnEstimate(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Unix(1000, 0))
	c := New(Options{QueueLength: 1, Clock: clk})
	ctx := context.Background()
	tk, _ := c.Admit(ctx, "p", 1)
	clk.Advance(10 * time.Second)
	tk.Release() // a slot held 10 s
	tk, _ = c.Admit(ctx, "p", 1)
	done := make(chan error, 1)
	go func() {
		t2, err := c.Admit(ctx, "p", 1)
		t2.Release()
		done <- err
	}()
	waitQueued(c, "p", 1)
	_, err := c.Admit(ctx, "p", 1)
	var r *Refusal
	if !errors.As(err, &r) || !r.Full {
		t.Fatalf("past a full queue: %v", err)
	}
	if r.RetryAfter != 20*time.Second {
		t.Fatalf("retry-after %v, want two holds of 10 s (position 2, one slot)", r.RetryAfter)
	}
	if other, err := c.Admit(ctx, "q", 1); err != nil {
		t.Fatalf("another principal: %v", err)
	} else {
		other.Release()
	}
	tk.Release()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// A wait that runs out is refused and leaves the queue; a client that
// leaves while queued frees its place, and a slot handed to it as it
// leaves goes on to the next.
func TestWaitRunsOutAndCanceledWaitersLeave(t *testing.T) {
	t.Parallel()
	clk := fakeclock.New(time.Time{})
	c := New(Options{Clock: clk})
	tk, _ := c.Admit(context.Background(), "p", 1)
	res := make(chan error, 1)
	go func() { _, err := c.Admit(context.Background(), "p", 1); res <- err }()
	// The waiter's timer armed, the clock runs its wait out.
	if d := <-clk.Armed(); d != DefaultMaxWait {
		t.Fatalf("waiting %v, want the default %v", d, DefaultMaxWait)
	}
	clk.Advance(DefaultMaxWait)
	var r *Refusal
	if err := <-res; !errors.As(err, &r) || r.Full || r.RetryAfter < time.Second {
		t.Fatalf("a wait that ran out: %v", err)
	}
	if _, q := c.State("p"); q != 0 {
		t.Fatalf("%d still queued", q)
	}

	ctx, cancel := context.WithCancel(context.Background())
	go func() { _, err := c.Admit(ctx, "p", 1); res <- err }()
	<-clk.Armed()
	waitQueued(c, "p", 1)
	next := make(chan Ticket, 1)
	go func() {
		t2, err := c.Admit(context.Background(), "p", 1)
		if err != nil {
			res <- err
		}
		next <- t2
	}()
	<-clk.Armed()
	waitQueued(c, "p", 2)
	cancel()
	if err := <-res; !errors.Is(err, ErrCanceled) {
		t.Fatalf("canceled wait: %v", err)
	}
	tk.Release()
	(<-next).Release()
	if in, q := c.State("p"); in != 0 || q != 0 {
		t.Fatalf("in flight %d, queued %d", in, q)
	}
}

// An uncapped principal costs no lock and no allocation.
func TestUncappedAdmitAllocatesNothing(t *testing.T) {
	c := New(Options{})
	ctx := context.Background()
	if n := testing.AllocsPerRun(1000, func() {
		tk, _ := c.Admit(ctx, "p", 0)
		tk.Release()
	}); n != 0 {
		t.Fatalf("%v allocations", n)
	}
	if _, ok := c.gates.Load("p"); ok {
		t.Fatal("an uncapped principal got a gate")
	}
}

func BenchmarkAdmitUncapped(b *testing.B) {
	c := New(Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, _ := c.Admit(ctx, "p", 0)
			tk.Release()
		}
	})
}

func BenchmarkAdmitCappedUncontended(b *testing.B) {
	c := New(Options{})
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, _ := c.Admit(ctx, "p", 1<<20)
			tk.Release()
		}
	})
}

// TryAdmit (an upstream's cap, where the router spills to the next
// upstream instead of waiting) takes a free slot, never waits, and counts
// with Admit's slots: a released slot goes to a waiter before it.
func TestTryAdmitTakesOnlyAFreeSlot(t *testing.T) {
	t.Parallel()
	c := New(Options{QueueLength: 4, Subject: "upstream"})
	a, ok1 := c.TryAdmit("u", 2)
	_, ok2 := c.TryAdmit("u", 2)
	if !ok1 || !ok2 {
		t.Fatalf("free slots refused: %v %v", ok1, ok2)
	}
	if _, ok := c.TryAdmit("u", 2); ok {
		t.Fatal("a third slot was taken under a cap of 2")
	}
	if in, q := c.State("u"); in != 2 || q != 0 {
		t.Fatalf("in flight %d queued %d", in, q)
	}
	got := make(chan Ticket, 1)
	go func() {
		tk, err := c.Admit(context.Background(), "u", 2)
		if err != nil {
			t.Error(err)
		}
		got <- tk
	}()
	waitQueued(c, "u", 1)
	a.Release()
	w := <-got
	if _, ok := c.TryAdmit("u", 2); ok {
		t.Fatal("the slot released to a waiter was taken again")
	}
	w.Release()
	tk, ok := c.TryAdmit("u", 2)
	if !ok {
		t.Fatal("a freed slot was refused")
	}
	tk.Release()
	if _, ok := c.TryAdmit("u", 0); !ok {
		t.Fatal("uncapped refused")
	}
	if in, _ := c.State("u"); in != 1 {
		t.Fatalf("in flight %d after releases, want 1", in)
	}
}

// A refusal names what was capped.
func TestRefusalNamesItsSubject(t *testing.T) {
	t.Parallel()
	c := New(Options{QueueLength: -1, Subject: "upstream"})
	tk, _ := c.Admit(context.Background(), "u", 1)
	defer tk.Release()
	_, err := c.Admit(context.Background(), "u", 1)
	var r *Refusal
	if !errors.As(err, &r) || !r.Full || r.Error() != "too many requests in flight and queued for this upstream" {
		t.Fatalf("refusal %v", err)
	}
	p := New(Options{QueueLength: -1})
	pt, _ := p.Admit(context.Background(), "p", 1)
	defer pt.Release()
	if _, err := p.Admit(context.Background(), "p", 1); err == nil || err.Error() != "too many requests in flight and queued for this principal" {
		t.Fatalf("principal refusal %v", err)
	}
}
