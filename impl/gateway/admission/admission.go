// Package admission caps the requests in flight per key: a principal's
// (max_in_flight) or an upstream's. Past its cap a request waits in a
// bounded first-in-first-out queue for a slot, up to a maximum wait,
// instead of being refused at once: a client that fans out (Claude Code's
// parallel subagents) sees its requests served in turn rather than rate
// limited (docs/routing.md).
package admission

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/service"
)

// Defaults of Options.
const (
	DefaultQueueLength = 64
	DefaultMaxWait     = 30 * time.Second
)

// Refusal is why a request was not admitted: the queue was full or the
// wait ran out. RetryAfter is an estimate of when a slot will be free.
type Refusal struct {
	Full       bool // the queue was full (else the wait ran out)
	RetryAfter time.Duration
	subject    string
}

func (r *Refusal) Error() string {
	if r.Full {
		return "too many requests in flight and queued for this " + r.subject
	}
	return "too many requests in flight for this " + r.subject + "; the queue wait ran out"
}

// ErrCanceled is returned when the request's context ended while it waited.
var ErrCanceled = errors.New("admission: request canceled while queued")

// Options configures a Controller.
type Options struct {
	// QueueLength is how many requests of one principal may wait at once
	// (0: DefaultQueueLength; negative: none wait).
	QueueLength int
	// MaxWait is how long a request waits for a slot (0: DefaultMaxWait).
	MaxWait time.Duration
	// Clock times the holds and the waits (nil: the real clock).
	Clock clock.Clock
	// Observe, when set, is told of every wait that ended (metrics).
	Observe func(waited time.Duration, admitted bool)
	// Subject names what a key is in a refusal's message (default
	// "principal").
	Subject string
}

// Controller holds every capped principal's slots and queue.
type Controller struct {
	queueLen int
	maxWait  time.Duration
	observe  func(time.Duration, bool)
	subject  string
	service.Base

	gates  sync.Map // principal id → *gate
	queued atomic.Int64
}

// New returns a Controller.
func New(o Options) *Controller {
	c := service.Init(service.Options{Clock: o.Clock}, &Controller{queueLen: o.QueueLength, maxWait: o.MaxWait, observe: o.Observe, subject: o.Subject})
	if c.subject == "" {
		c.subject = "principal"
	}
	if c.queueLen == 0 {
		c.queueLen = DefaultQueueLength
	}
	if c.queueLen < 0 {
		c.queueLen = 0
	}
	if c.maxWait <= 0 {
		c.maxWait = DefaultMaxWait
	}
	return c
}

// gate is one principal's slots and queue.
type gate struct {
	mu       sync.Mutex
	inFlight int
	queue    []*waiter // first in, first out
	// hold is a moving average of how long a slot is held, in
	// nanoseconds: what a refusal's retry-after is estimated from.
	hold float64
}

type waiter struct {
	ready   chan struct{} // closed when the slot is handed over
	granted bool          // under gate.mu: the slot is this waiter's
}

// Ticket is an admitted request's slot; Release gives it back. The zero
// Ticket (an uncapped principal) releases nothing.
type Ticket struct {
	g     *gate
	c     *Controller
	since time.Time
}

// Admit takes one of principal's limit slots (limit 0 or less: uncapped,
// nothing is counted). Past the cap it waits in the principal's queue, in
// arrival order, at most MaxWait; a full queue or a wait that ran out is
// a *Refusal, a context that ended ErrCanceled.
func (c *Controller) Admit(ctx context.Context, principal string, limit int) (Ticket, error) {
	if limit <= 0 || c == nil {
		return Ticket{}, nil
	}
	g := c.gate(principal)
	g.mu.Lock()
	if g.inFlight < limit && len(g.queue) == 0 {
		g.inFlight++
		g.mu.Unlock()
		return Ticket{g: g, c: c, since: c.Clock.Now()}, nil
	}
	if len(g.queue) >= c.queueLen {
		r := &Refusal{Full: true, RetryAfter: g.estimate(len(g.queue)+1, limit), subject: c.subject}
		g.mu.Unlock()
		if c.observe != nil {
			c.observe(0, false)
		}
		return Ticket{}, r
	}
	w := &waiter{ready: make(chan struct{})}
	g.queue = append(g.queue, w)
	// Counted under the lock, so Queued agrees with State.
	c.queued.Add(1)
	g.mu.Unlock()
	defer c.queued.Add(-1)

	start := c.Clock.Now()
	t, expired := c.Clock.NewTimer(c.maxWait)
	defer t.Stop()
	select {
	case <-w.ready:
		c.waited(start, true)
		return Ticket{g: g, c: c, since: c.Clock.Now()}, nil
	case <-expired:
		if g.leave(w) {
			c.waited(start, true)
			return Ticket{g: g, c: c, since: c.Clock.Now()}, nil
		}
		c.waited(start, false)
		g.mu.Lock()
		r := &Refusal{RetryAfter: g.estimate(len(g.queue)+1, limit), subject: c.subject}
		g.mu.Unlock()
		return Ticket{}, r
	case <-ctx.Done():
		if g.leave(w) {
			// Handed a slot as the client left: pass it on.
			Ticket{g: g, c: c}.Release()
		}
		c.waited(start, false)
		return Ticket{}, ErrCanceled
	}
}

// TryAdmit takes one of key's limit slots only if one is free and nobody
// waits for one (limit 0 or less: uncapped, always admitted); it never
// waits. A router tries the next upstream when this fails.
func (c *Controller) TryAdmit(key string, limit int) (Ticket, bool) {
	if limit <= 0 || c == nil {
		return Ticket{}, true
	}
	g := c.gate(key)
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inFlight < limit && len(g.queue) == 0 {
		g.inFlight++
		return Ticket{g: g, c: c, since: c.Clock.Now()}, true
	}
	return Ticket{}, false
}

func (c *Controller) waited(start time.Time, admitted bool) {
	if c.observe != nil {
		c.observe(c.Clock.Now().Sub(start), admitted)
	}
}

func (c *Controller) gate(principal string) *gate {
	if g, ok := c.gates.Load(principal); ok {
		return g.(*gate)
	}
	g, _ := c.gates.LoadOrStore(principal, &gate{})
	return g.(*gate)
}

// leave takes w out of the queue; true when it had been handed the slot
// already (the caller owns it).
func (g *gate) leave(w *waiter) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if w.granted {
		return true
	}
	for i, q := range g.queue {
		if q == w {
			g.queue = append(g.queue[:i], g.queue[i+1:]...)
			break
		}
	}
	return false
}

// estimate is when a request at position pos of the queue would get a
// slot, from the average hold: a slot frees every hold/limit. At least a
// second (retry-after counts whole seconds).
func (g *gate) estimate(pos, limit int) time.Duration {
	d := time.Duration(g.hold * float64(pos) / float64(limit))
	return max(d, time.Second)
}

// Release gives the slot back: to the first waiter if any, else free.
func (t Ticket) Release() {
	g := t.g
	if g == nil {
		return
	}
	var held time.Duration
	if !t.since.IsZero() {
		held = t.c.Clock.Now().Sub(t.since)
	}
	g.mu.Lock()
	if held > 0 {
		if g.hold == 0 {
			g.hold = float64(held)
		} else {
			g.hold += (float64(held) - g.hold) / 8
		}
	}
	if len(g.queue) > 0 {
		w := g.queue[0]
		g.queue = g.queue[1:]
		w.granted = true
		close(w.ready)
	} else {
		g.inFlight--
	}
	g.mu.Unlock()
}

// Queued is how many requests wait for a slot now, over all principals.
func (c *Controller) Queued() int64 {
	if c == nil {
		return 0
	}
	return c.queued.Load()
}

// State is one principal's slots in use and requests waiting.
func (c *Controller) State(principal string) (inFlight, queued int) {
	if c == nil {
		return 0, 0
	}
	v, ok := c.gates.Load(principal)
	if !ok {
		return 0, 0
	}
	g := v.(*gate)
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.inFlight, len(g.queue)
}
