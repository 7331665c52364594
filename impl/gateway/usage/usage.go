// Package usage records proxied requests as request events without slowing
// the request path: the handler appends what it captured to a buffer and
// returns; a background goroutine takes the buffer several times per flush
// interval (or when a batch is full), extracts token usage and writes the
// events.
package usage

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/service"
)

// Pending is one finished request awaiting extraction and storage.
type Pending struct {
	Event store.RequestEvent
	// Body is the captured non-streaming response body (may be truncated).
	Body []byte
	// SSE holds the captured message_start / message_delta data lines of a
	// streaming response.
	SSE [][]byte
	// Release, when set, is called once the captures have been read, so the
	// request path can pool its buffers.
	Release func()
}

// Writer stores batches of events.
type Writer interface {
	InsertRequestEvents(ctx context.Context, events []store.RequestEvent) error
}

// Recorder batches events into storage. Record never blocks: when the queue
// is full the event is dropped and counted, because losing a usage row is
// better than stalling client traffic.
//
// Record does not wake the writer for every request (a goroutine wake-up
// per request costs the request path a thread hand-off and, under load,
// scheduler latency): the writer takes what is queued on its own tick, or
// when a batch is full. An event is therefore written, and seen by
// OnEvent, within one write period (WriteEvery) of Record, never later than
// one flush interval.
//
// The write period is a fraction of the flush interval so that the work
// comes in small transactions spread over the interval rather than one
// burst per interval, which the proxy's slowest requests overlapped
// (docs/decisions.md, "Usage writes spread over the flush interval").
// Smaller bursts overlap more requests, each by less; WriteEvery =
// FlushInterval gives back one write per interval.
type Recorder struct {
	w Writer
	// Base's clock times the writes (WriteEvery).
	service.Base
	// Requests append to one of several shards, the first free one from
	// a random start (lockShard), so concurrent requests do not wait on
	// each other's lock nor on the writer's.
	shards   []shard
	closed   atomic.Bool
	queueCap int           // per shard
	wakeAt   int           // a shard this long wakes the writer
	full     chan struct{} // enough is queued: wake the writer early (never closed)
	stop     chan struct{} // closed by Close
	batch    int
	every    time.Duration
	onEvent  func(store.RequestEvent)
	price    func(*store.RequestEvent)
	dropped  atomic.Int64
	written  atomic.Int64
	flushReq chan chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	cancel   context.CancelFunc
}

// Options tunes a Recorder; zero values take defaults.
type Options struct {
	QueueSize     int           // default 8192
	BatchSize     int           // default 256
	FlushInterval time.Duration // default 200ms
	// WriteEvery is how often the writer takes what is queued and writes
	// it, one transaction each time; default a quarter of FlushInterval,
	// never more than FlushInterval (the durability bound of
	// docs/operations.md, "Crash windows").
	WriteEvery time.Duration
	Logger     *slog.Logger
	// Clock times the writes (nil: the real clock).
	Clock clock.Clock
	// Price, when set, fills an event's cost once its token counts are
	// known, off the request path, before OnEvent sees it.
	Price func(*store.RequestEvent)
	// OnEvent, when set, sees each event once its token counts are known
	// (principal token limits), on the recorder's goroutine.
	OnEvent func(store.RequestEvent)
}

// writesPerInterval is how many writes the default WriteEvery spreads over
// a flush interval: at 300-600 requests a second, transactions of 15-30
// events, each a fraction of the spread of an ordinary request's latency.
const writesPerInterval = 4

// NewRecorder starts the background writer.
func NewRecorder(w Writer, o Options) *Recorder {
	if o.QueueSize <= 0 {
		o.QueueSize = 8192
	}
	if o.BatchSize <= 0 {
		o.BatchSize = 256
	}
	if o.FlushInterval <= 0 {
		o.FlushInterval = 200 * time.Millisecond
	}
	if o.WriteEvery <= 0 {
		o.WriteEvery = o.FlushInterval / writesPerInterval
	}
	o.WriteEvery = min(o.WriteEvery, o.FlushInterval)
	ctx, cancel := context.WithCancel(context.Background())
	r := &Recorder{
		w: w, full: make(chan struct{}, 1), stop: make(chan struct{}), batch: o.BatchSize,
		every: o.WriteEvery, onEvent: o.OnEvent, price: o.Price, flushReq: make(chan chan struct{}), done: make(chan struct{}), cancel: cancel,
	}
	service.Init(service.Options{Logger: o.Logger, Clock: o.Clock}, r)
	// One shard per 32 events of a batch (at most 8): a full batch always
	// fills one shard to wakeAt, so a batch is never kept waiting longer.
	n := max(1, min(8, o.BatchSize/32))
	r.shards = make([]shard, n)
	r.queueCap, r.wakeAt = max(1, o.QueueSize/n), max(1, o.BatchSize/n)
	go r.run(ctx)
	return r
}

// shard is one part of the queue, padded to its own cache lines.
type shard struct {
	mu    sync.Mutex
	queue []Pending // guarded by mu
	spare []Pending // the writer's drained slice, handed back for reuse
	_     [64]byte
}

// Record queues a finished request. It never blocks.
func (r *Recorder) Record(p Pending) {
	sh := r.lockShard()
	if r.closed.Load() || len(sh.queue) >= r.queueCap {
		sh.mu.Unlock()
		r.dropped.Add(1)
		if p.Release != nil {
			p.Release()
		}
		return
	}
	sh.queue = append(sh.queue, p)
	wake := len(sh.queue) == r.wakeAt
	sh.mu.Unlock()
	if wake {
		select {
		case r.full <- struct{}{}:
		default:
		}
	}
}

// lockShard locks a shard for Record. It starts at a random one and takes
// the first that is free: a request that would wait on another's lock (or
// the writer's take) goes to the next shard instead, so concurrent
// requests never queue on one mutex. Only when every shard is busy does it
// wait, on the first.
func (r *Recorder) lockShard() *shard {
	n := len(r.shards)
	if n == 1 {
		sh := &r.shards[0]
		sh.mu.Lock()
		return sh
	}
	k := rand.N(n)
	for range n {
		if sh := &r.shards[k]; sh.mu.TryLock() {
			return sh
		}
		if k++; k == n {
			k = 0
		}
	}
	sh := &r.shards[k]
	sh.mu.Lock()
	return sh
}

// take hands the writer what one shard queued, leaving an empty slice in
// its place (the one the writer handed back last time).
func (sh *shard) take() []Pending {
	sh.mu.Lock()
	q := sh.queue
	sh.queue, sh.spare = sh.spare[:0], nil
	sh.mu.Unlock()
	return q
}

// giveBack returns a drained slice for the next take.
func (sh *shard) giveBack(q []Pending) {
	clear(q)
	sh.mu.Lock()
	if sh.spare == nil {
		sh.spare = q[:0]
	}
	sh.mu.Unlock()
}

// Dropped counts events lost to a full queue.
func (r *Recorder) Dropped() int64 { return r.dropped.Load() }

// Written counts events stored.
func (r *Recorder) Written() int64 { return r.written.Load() }

// Flush waits until everything queued before the call is written (or ctx ends).
func (r *Recorder) Flush(ctx context.Context) {
	ack := make(chan struct{})
	select {
	case r.flushReq <- ack:
	case <-ctx.Done():
		return
	case <-r.done:
		return
	}
	select {
	case <-ack:
	case <-ctx.Done():
	}
}

// Close drains the queue, writes what remains and stops.
func (r *Recorder) Close() {
	r.stopOnce.Do(func() {
		r.closed.Store(true)
		close(r.stop)
		<-r.done
		r.cancel()
	})
}

func (r *Recorder) run(ctx context.Context) {
	defer close(r.done)
	t, ticks := r.Clock.NewTimer(r.every)
	defer t.Stop()
	buf := make([]store.RequestEvent, 0, r.batch)
	// A failed batch stays in buf and is retried on the next flush, so a
	// database restart loses no usage; beyond retryLimit the oldest go.
	flush := func() {
		if len(buf) == 0 {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := r.w.InsertRequestEvents(wctx, buf)
		cancel()
		if err != nil {
			r.Logger.Warn("write request events; will retry", "count", len(buf), "error", err)
			if over := len(buf) - retryLimit; over > 0 {
				r.dropped.Add(int64(over))
				buf = append(buf[:0], buf[over:]...)
			}
			return
		}
		r.written.Add(int64(len(buf)))
		buf = buf[:0]
	}
	// add works on the queued Pending and on buf's copy of its event in
	// place: price takes the event by pointer, so a Pending copied into
	// add would be moved to the heap, one allocation per event.
	add := func(p *Pending) {
		Extract(p)
		buf = append(buf, p.Event)
		ev := &buf[len(buf)-1]
		if r.price != nil {
			r.price(ev)
		}
		if r.onEvent != nil {
			r.onEvent(*ev)
		}
		if len(buf)%r.batch == 0 {
			flush()
		}
	}
	drain := func() {
		for i := range r.shards {
			sh := &r.shards[i]
			q := sh.take()
			for j := range q {
				add(&q[j])
			}
			sh.giveBack(q)
		}
	}
	for {
		select {
		case <-r.full:
			// A batch's worth is waiting: write it now, so that no more
			// than a batch is ever held unwritten.
			drain()
			flush()
		case <-r.stop:
			// Record stops queueing once closed is set; one taken
			// before that is in a shard by the time its lock is free.
			drain()
			flush()
			return
		case <-ticks:
			drain()
			flush()
			t.Reset(r.every)
		case ack := <-r.flushReq:
			drain()
			flush()
			close(ack)
		}
	}
}

// retryLimit bounds the events held in memory while storage is failing.
const retryLimit = 65536

// Extract fills the event's token counts from the captured response.
func Extract(p *Pending) {
	defer func() {
		if p.Release != nil {
			p.Release()
			p.Release = nil
		}
		p.Body, p.SSE = nil, nil
	}()
	u, exact := scanUsage(p.Body, p.SSE)
	if !exact {
		u = decodeUsage(p.Body, p.SSE)
	}
	p.Event.InputTokens = u.InputTokens
	p.Event.OutputTokens = u.OutputTokens
	p.Event.CacheCreationInputTokens = u.CacheCreationInputTokens
	p.Event.CacheReadInputTokens = u.CacheReadInputTokens
	// The TTL split prices the cache writes; without it every write is a
	// 5-minute one, the API's default.
	p.Event.CacheCreation1hInputTokens = min(u.CacheCreation.Ephemeral1h, u.CacheCreationInputTokens)
}

// scanUsage reads the usage of a message body or of stream data lines
// without allocating; exact is false when it cannot be sure to read what
// decodeUsage would (see field). On well-formed JSON it reads what
// decodeUsage reads; a capture cut short (no closing brace) gives no usage
// either way. Checking full JSON validity first cost more than the rest of
// the request's bookkeeping together, for providers that send JSON.
// lineKeys are the top-level fields of an event line scanUsage reads.
var lineKeys = [...]string{"type", "message", "usage"}

// bodyUsage is the one field read of a message body (and of a line's
// message).
var bodyUsage = [...]string{"usage"}

func scanUsage(body []byte, sse [][]byte) (u tokenUsage, exact bool) {
	var bodyVals [1][]byte
	// An inexact walk stops where it is unsure, so its end says nothing:
	// decoding answers instead, whole or not.
	if end, ex := object(body, skipSpace(body, 0), bodyUsage[:], bodyVals[:], -1, nil, nil); !ex {
		return u, false
	} else if len(body) > 0 && whole(body, end) {
		v := bodyVals[0]
		var got tokenUsage
		if set, ok, ex := readUsage(v, &got); !ex {
			return u, false
		} else if set && ok {
			u = got
		}
	}
	for _, line := range sse {
		line = bytes.TrimPrefix(line, []byte("data:"))
		// Only a message_start or message_delta line changes u, whether
		// it decodes or not, and without an escape its type can only
		// name one of them if the bytes are there: the other kept lines
		// (content_block_start) cost two searches, not a walk.
		if bytes.IndexByte(line, '\\') < 0 && !bytes.Contains(line, []byte("message_")) {
			continue
		}
		// The line as decodeUsage decodes it: a mistyped field anywhere
		// in it makes the whole line an error, skipped. One walk reads
		// the fields, message's usage, and that the line is whole.
		var vals [3][]byte
		var inMsgVal [1][]byte
		end, ex1 := object(line, skipSpace(line, 0), lineKeys[:], vals[:], 1, bodyUsage[:], inMsgVal[:])
		if !ex1 {
			return u, false
		}
		if !whole(line, end) {
			continue
		}
		typ, msg, top, inMsg := vals[0], vals[1], vals[2], inMsgVal[0]
		if bytes.IndexByte(typ, '\\') >= 0 {
			return u, false
		}
		var start, delta tokenUsage
		startSet, ok1, ex5 := readUsage(inMsg, &start)
		deltaSet, ok2, ex6 := readUsage(top, &delta)
		if !ex5 || !ex6 {
			return u, false
		}
		typeOK := typ == nil || typ[0] == '"' || string(typ) == "null"
		msgOK := msg == nil || msg[0] == '{' || string(msg) == "null"
		if !ok1 || !ok2 || !typeOK || !msgOK {
			continue
		}
		switch string(typ) {
		case `"message_start"`:
			if startSet {
				u = start
			}
		case `"message_delta"`:
			if deltaSet {
				// message_delta carries cumulative output tokens, and on
				// some providers updated input and cache counts too.
				u.OutputTokens = delta.OutputTokens
				if delta.InputTokens > 0 {
					u.InputTokens = delta.InputTokens
				}
				if delta.CacheCreationInputTokens > 0 {
					u.CacheCreationInputTokens = delta.CacheCreationInputTokens
				}
				if delta.CacheReadInputTokens > 0 {
					u.CacheReadInputTokens = delta.CacheReadInputTokens
				}
				if delta.CacheCreation.Ephemeral1h > 0 {
					u.CacheCreation = delta.CacheCreation
				}
			}
		}
	}
	return u, true
}

// decodeUsage is scanUsage by encoding/json: the reference, used where the
// scanner cannot be sure.
func decodeUsage(body []byte, sse [][]byte) tokenUsage {
	var u tokenUsage
	if len(body) > 0 {
		var msg struct {
			Usage *tokenUsage `json:"usage"`
		}
		if json.Unmarshal(body, &msg) == nil && msg.Usage != nil {
			u = *msg.Usage
		}
	}
	for _, line := range sse {
		line = bytes.TrimPrefix(line, []byte("data:"))
		var ev struct {
			Type    string `json:"type"`
			Message struct {
				Usage *tokenUsage `json:"usage"`
			} `json:"message"`
			Usage *tokenUsage `json:"usage"`
		}
		if json.Unmarshal(line, &ev) != nil {
			continue
		}
		switch ev.Type {
		case "message_start":
			if ev.Message.Usage != nil {
				u = *ev.Message.Usage
			}
		case "message_delta":
			if ev.Usage != nil {
				u.OutputTokens = ev.Usage.OutputTokens
				if ev.Usage.InputTokens > 0 {
					u.InputTokens = ev.Usage.InputTokens
				}
				if ev.Usage.CacheCreationInputTokens > 0 {
					u.CacheCreationInputTokens = ev.Usage.CacheCreationInputTokens
				}
				if ev.Usage.CacheReadInputTokens > 0 {
					u.CacheReadInputTokens = ev.Usage.CacheReadInputTokens
				}
				if ev.Usage.CacheCreation.Ephemeral1h > 0 {
					u.CacheCreation = ev.Usage.CacheCreation
				}
			}
		}
	}
	return u
}

type tokenUsage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	// CacheCreation is the TTL split of the cache writes; only the 1-hour
	// part is kept (the rest prices as 5-minute writes). A value, not a
	// pointer, so the scanner fills it without allocating.
	CacheCreation cacheCreation `json:"cache_creation"`
}

type cacheCreation struct {
	Ephemeral1h int64 `json:"ephemeral_1h_input_tokens"`
}
