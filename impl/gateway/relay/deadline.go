package relay

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/admission"
	"go.opentelemetry.io/otel/trace"
)

// Defaults of the proxy path's deadlines (docs/resilience.md, "Proxy path").
const (
	// DefaultHeaderTimeout bounds the wait for an upstream's response
	// headers on streaming requests and count_tokens. The API sends a
	// stream's headers before it generates; a minute covers the prompt
	// processing of the largest prompts with room to spare.
	DefaultHeaderTimeout = 60 * time.Second
	// DefaultNonStreamHeaderTimeout bounds the same wait for non-streaming
	// Messages requests, whose headers come only after the whole answer
	// was generated: the official SDKs' own default request timeout, so
	// the proxy never gives up before its client would.
	DefaultNonStreamHeaderTimeout = 10 * time.Minute
	// DefaultIdleTimeout ends a response from which nothing was read for
	// this long. The API interleaves ping events in long streams, so a
	// healthy stream is never silent for minutes.
	DefaultIdleTimeout = 5 * time.Minute
	// DefaultBodyReadTimeout bounds reading one request body: long enough
	// for the largest body on a slow link.
	DefaultBodyReadTimeout = 60 * time.Second
	// DefaultMaxBodyBytesInFlight caps the request body bytes held at once
	// by all requests together.
	DefaultMaxBodyBytesInFlight = 256 << 20
)

var (
	errHeaderTimeout = errors.New("upstream response headers timed out")
	errUpstreamIdle  = errors.New("upstream response idle")
)

// mono reads the time elapsed on clk since base: on the real clock,
// Since of a reading with a monotonic part costs one clock read, where Now
// costs two.
type mono struct {
	clk  clock.Clock
	base time.Time
}

func (m *mono) now() int64 { return int64(m.clk.Since(m.base)) }

// expirer is what a lazyTimer calls when its deadline passed.
type expirer interface{ expire() }

// lazyTimer calls on.expire once its deadline passed, like time.AfterFunc,
// but a Reset that moves the deadline later (the idle deadline re-armed on
// every read of a response) only records it: the runtime timer, when it
// fires early, re-arms itself for what is left. A read then costs one
// clock read and one atomic store instead of a runtime timer update under
// its lock. The zero value is unarmed; start arms it once.
type lazyTimer struct {
	on  expirer
	m   *mono
	t   clock.Timer
	due atomic.Int64 // m.now() when on.expire is due; 0: stopped or fired
}

func (l *lazyTimer) start(m *mono, d time.Duration, on expirer) {
	l.on, l.m = on, m
	l.due.Store(m.now() + int64(d))
	l.t = m.clk.AfterFunc(d, l.fire)
}

func (l *lazyTimer) Reset(d time.Duration) bool {
	due := l.m.now() + int64(d)
	old := l.due.Swap(due)
	if old == 0 || due < old {
		// Stopped, fired, or due sooner than the runtime timer is set for.
		l.t.Reset(d)
	}
	return old != 0
}

func (l *lazyTimer) Stop() bool {
	old := l.due.Swap(0)
	l.t.Stop()
	return old != 0
}

func (l *lazyTimer) fire() {
	for {
		due := l.due.Load()
		if due == 0 {
			return // stopped
		}
		if now := l.m.now(); now < due {
			l.t.Reset(time.Duration(due - now))
			return
		}
		if l.due.CompareAndSwap(due, 0) {
			l.on.expire()
			return
		}
		// A Reset moved the deadline meanwhile: look again.
	}
}

// attempt is one outbound exchange with one upstream. Its context is
// cancelled, with errHeaderTimeout or errUpstreamIdle as the cause, by one
// timer that first bounds the wait for headers and then, re-armed on every
// read, the silence between reads.
type attempt struct {
	ctx    context.Context
	cancel context.CancelCauseFunc
	idle   time.Duration
	// reading is set once headers arrived: the timer then means "idle".
	reading atomic.Bool
	// deadline is the header timeout, then the idle deadline; it and body,
	// the outbound request's, are kept here: they cost the request no
	// allocations of their own.
	deadline lazyTimer
	body     bodyReader
	url      url.URL // the outbound request's
	// slot is the upstream's slot under its max_in_flight (zero: uncapped),
	// given back when the attempt is done.
	slot admission.Ticket
	// span traces the attempt (trace.go); nil when tracing is off.
	span trace.Span
}

func (h *Handler) newAttempt(parent context.Context, headerTimeout time.Duration) *attempt {
	a := &attempt{idle: h.idleTimeout}
	a.ctx, a.cancel = context.WithCancelCause(parent)
	a.deadline.start(&h.mono, headerTimeout, a)
	return a
}

func (a *attempt) expire() {
	if a.reading.Load() {
		a.cancel(errUpstreamIdle)
	} else {
		a.cancel(errHeaderTimeout)
	}
}

// headersIn switches the timer from the header timeout to the idle deadline.
func (a *attempt) headersIn() {
	a.reading.Store(true)
	a.deadline.Reset(a.idle)
}

// progress re-arms the idle deadline after a read returned data.
func (a *attempt) progress() { a.deadline.Reset(a.idle) }

// done releases the attempt's timer and context.
func (a *attempt) done() {
	a.deadline.Stop()
	a.cancel(context.Canceled)
	a.slot.Release()
	a.slot = admission.Ticket{}
	if a.span != nil {
		a.span.End()
	}
}

// cause is why the attempt's context ended (nil while it has not).
func (a *attempt) cause() error { return context.Cause(a.ctx) }

// readDeadliner is implemented by net/http's response writer (HTTP/1 and
// HTTP/2): it bounds reads of the request body on the client connection.
type readDeadliner interface{ SetReadDeadline(time.Time) error }

// dontWaitForBody makes a refusal written before the body was read go out
// at once: net/http otherwise reads (discards) an unread body of up to 256
// KiB before it writes the response, so a client that sent headers and
// stalled would hold the connection as long as it likes. With the read
// deadline in the past that discard fails and the connection is closed
// after the answer instead of being reused.
func dontWaitForBody(w any) {
	if d, ok := w.(readDeadliner); ok {
		// A network deadline, so the wall clock; a writer that cannot is
		// reused as before.
		_ = d.SetReadDeadline(time.Now())
	}
}

// heldBytes counts request body bytes held by requests in flight.
type heldBytes struct {
	n   atomic.Int64
	max int64
}

// take reserves n bytes; false (nothing reserved) past the cap.
func (b *heldBytes) take(n int64) bool {
	if b.n.Add(n) > b.max {
		b.n.Add(-n)
		return false
	}
	return true
}

func (b *heldBytes) give(n int64) {
	if n != 0 {
		b.n.Add(-n)
	}
}

// ErrShuttingDown is the cause the server cancels its requests' base
// context with when the drain ends with requests still in flight: the
// relay then ends each visibly (an error event, or a 503) instead of
// taking the cut for its client going away.
var ErrShuttingDown = errors.New("the proxy is shutting down")

// shuttingDown reports whether r was cut by the proxy's shutdown.
func shuttingDown(r *http.Request) bool {
	return errors.Is(context.Cause(r.Context()), ErrShuttingDown)
}
