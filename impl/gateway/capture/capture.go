// Package capture keeps the request and response bodies of the principals
// that opted in (store.Principal's capture flag), sealed under the master
// key, for audits and debugging. The request path only fills a capped
// Buffer and hands the exchange to a Sink, which never blocks it: a full
// queue drops the exchange and counts it. The Sink's worker seals and
// writes.
package capture

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// DefaultLimit caps each body captured (request and response alike).
const DefaultLimit = 256 << 10

// AD is the associated data an exchange is sealed with: a sealed exchange
// moved to another event or principal does not open.
func AD(exchangeID, principalID string) []byte {
	return []byte("captured-exchange:" + exchangeID + "@" + principalID)
}

// Buffer is a body captured up to a limit: writes past it are counted
// but not kept. Its writes never fail, so it can sit in an io.TeeReader
// or beside a response writer without changing what the client sees.
type Buffer struct {
	limit int
	buf   []byte
	total int64
}

// NewBuffer returns a buffer keeping at most limit bytes.
func NewBuffer(limit int) *Buffer { return &Buffer{limit: limit} }

func (b *Buffer) Write(p []byte) (int, error) {
	b.total += int64(len(p))
	if room := b.limit - len(b.buf); room > 0 {
		b.buf = append(b.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes returns what was kept.
func (b *Buffer) Bytes() []byte { return b.buf }

// Truncated reports whether more was written than kept.
func (b *Buffer) Truncated() bool { return b.total > int64(len(b.buf)) }

// Exchange is one captured request and response.
type Exchange struct {
	// EventID is the request event's id, which the exchange is read by.
	EventID     string
	PrincipalID string
	At          time.Time
	Request     []byte
	Response    []byte
	Truncated   bool
}

// Bodies are what an exchange's sealed column holds.
type Bodies struct {
	Request   []byte `json:"request"`
	Response  []byte `json:"response"`
	Truncated bool   `json:"truncated"`
}

// Sealer seals under the master key (secret.Box).
type Sealer interface {
	Seal(plaintext, associatedData []byte) ([]byte, error)
}

// Opener opens what a Sealer sealed (secret.Box).
type Opener interface {
	Open(ciphertext, associatedData []byte) ([]byte, error)
}

// Writer stores sealed exchanges (store.CaptureStore).
type Writer interface {
	InsertCapturedExchanges(ctx context.Context, xs []store.CapturedExchange) error
}

// Seal makes the stored row of x.
func Seal(box Sealer, x Exchange) (store.CapturedExchange, error) {
	pt, err := json.Marshal(Bodies{Request: x.Request, Response: x.Response, Truncated: x.Truncated})
	if err != nil {
		return store.CapturedExchange{}, err
	}
	ct, err := box.Seal(pt, AD(x.EventID, x.PrincipalID))
	if err != nil {
		return store.CapturedExchange{}, err
	}
	return store.CapturedExchange{EventID: x.EventID, PrincipalID: x.PrincipalID, At: x.At,
		RequestBytes: int64(len(x.Request)), ResponseBytes: int64(len(x.Response)), Truncated: x.Truncated, Sealed: ct}, nil
}

// ErrSealed: the master key does not open the exchange under its event
// and principal (another key, or a row moved).
var ErrSealed = errors.New("captured exchange does not open under the master key")

// Open returns the bodies of a stored exchange.
func Open(box Opener, x store.CapturedExchange) (Bodies, error) {
	pt, err := box.Open(x.Sealed, AD(x.EventID, x.PrincipalID))
	if err != nil {
		return Bodies{}, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	var b Bodies
	if err := json.Unmarshal(pt, &b); err != nil {
		return Bodies{}, fmt.Errorf("%w: %v", ErrSealed, err)
	}
	return b, nil
}

// Sink queues exchanges for its worker (Run).
type Sink struct {
	queue   chan Exchange
	stop    chan struct{}
	once    sync.Once
	box     Sealer
	w       Writer
	metrics *Metrics
	log     *slog.Logger
}

// NewSink returns a sink holding at most queue exchanges not yet written.
func NewSink(w Writer, box Sealer, queue int, m *Metrics, log *slog.Logger) *Sink {
	if m == nil {
		m = NewMetrics(nil)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Sink{queue: make(chan Exchange, queue), stop: make(chan struct{}), box: box, w: w, metrics: m, log: log}
}

// Submit queues x without blocking; a full queue drops it.
func (s *Sink) Submit(x Exchange) {
	if x.Truncated {
		s.metrics.track(OutcomeTruncated)
	}
	select {
	case s.queue <- x:
	default:
		s.metrics.track(OutcomeDropped)
	}
}

// Close ends Run once the exchanges queued by then are written. A Submit
// after it is harmless (a request the drain gave up on): the queue is
// never closed, what is left in it is not written.
func (s *Sink) Close() { s.once.Do(func() { close(s.stop) }) }

// maxBatch bounds the exchanges written in one transaction.
const maxBatch = 64

// DrainTimeout bounds the last writes of a stopping sink, so a database
// that does not answer cannot hold the shutdown.
const DrainTimeout = 10 * time.Second

// Run seals and writes queued exchanges until Close or ctx ends (a
// service loop: the server stops it by ctx), then writes what is still
// queued, within DrainTimeout. A batch that fails to seal or write is
// counted as failed and logged without its bodies.
func (s *Sink) Run(ctx context.Context) {
	batch := make([]store.CapturedExchange, 0, maxBatch)
	draining := false
	for {
		stopping := false
		batch = batch[:0]
		select {
		case x := <-s.queue:
			batch = s.add(batch, x)
		case <-s.stop:
			stopping = true
		case <-ctx.Done():
		}
		// Ended (whichever case was picked): the rest is written on a
		// context of its own.
		if ctx.Err() != nil && !draining {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), DrainTimeout)
			defer cancel()
			draining = true
		}
		stopping = stopping || draining
		for {
			var took int
			batch, took = s.fill(batch)
			s.write(ctx, batch)
			batch = batch[:0]
			// Stopping, the queue is written to its end.
			if !stopping || took == 0 {
				break
			}
		}
		if stopping {
			return
		}
	}
}

// fill adds what is queued now to batch, up to maxBatch: one transaction.
func (s *Sink) fill(batch []store.CapturedExchange) ([]store.CapturedExchange, int) {
	took := 0
	for len(batch) < maxBatch {
		select {
		case x := <-s.queue:
			batch = s.add(batch, x)
			took++
		default:
			return batch, took
		}
	}
	return batch, took
}

func (s *Sink) add(batch []store.CapturedExchange, x Exchange) []store.CapturedExchange {
	row, err := Seal(s.box, x)
	if err != nil {
		s.metrics.track(OutcomeFailed)
		s.log.Error("capture: sealing an exchange failed", "event_id", x.EventID, "principal_id", x.PrincipalID, "err", err)
		return batch
	}
	return append(batch, row)
}

func (s *Sink) write(ctx context.Context, batch []store.CapturedExchange) {
	if len(batch) == 0 {
		return
	}
	if err := s.w.InsertCapturedExchanges(ctx, batch); err != nil {
		s.metrics.add(OutcomeFailed, len(batch))
		s.log.Error("capture: writing exchanges failed", "exchanges", len(batch), "err", err)
		return
	}
	s.metrics.add(OutcomeStored, len(batch))
}
