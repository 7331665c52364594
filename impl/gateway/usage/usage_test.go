package usage

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

type memWriter struct {
	mu      sync.Mutex
	batches [][]store.RequestEvent
	block   chan struct{}
	fail    bool
	wrote   chan int // when set, receives the size of each stored batch
}

func (m *memWriter) InsertRequestEvents(ctx context.Context, evs []store.RequestEvent) error {
	if m.block != nil {
		<-m.block
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fail {
		return errors.New("db down")
	}
	m.batches = append(m.batches, append([]store.RequestEvent(nil), evs...))
	if m.wrote != nil {
		m.wrote <- len(evs)
	}
	return nil
}

func (m *memWriter) total() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, b := range m.batches {
		n += len(b)
	}
	return n
}

func TestRecorderBatchesAndFlushes(t *testing.T) {
	t.Parallel()
	w := &memWriter{}
	r := NewRecorder(w, Options{BatchSize: 10, FlushInterval: time.Hour})
	defer r.Close()
	released := 0
	for i := 0; i < 25; i++ {
		r.Record(Pending{Event: store.RequestEvent{Model: "m"}, Body: []byte(`{"usage":{"input_tokens":3,"output_tokens":4}}`), Release: func() { released++ }})
	}
	r.Flush(context.Background())
	if w.total() != 25 || r.Written() != 25 {
		t.Fatalf("written %d / %d", w.total(), r.Written())
	}
	w.mu.Lock()
	if len(w.batches) != 3 || len(w.batches[0]) != 10 || w.batches[0][0].InputTokens != 3 || w.batches[0][0].OutputTokens != 4 {
		t.Fatalf("batches %d first %+v", len(w.batches), w.batches[0][0])
	}
	w.mu.Unlock()
	if released != 25 {
		t.Fatalf("released %d", released)
	}
}

// Record never blocks the request path: with the writer stuck and the queue
// full, events are dropped and counted.
func TestRecorderDropsWhenFull(t *testing.T) {
	t.Parallel()
	w := &memWriter{block: make(chan struct{})}
	r := NewRecorder(w, Options{QueueSize: 4, BatchSize: 1, FlushInterval: time.Hour})
	done := make(chan struct{})
	go func() {
		for i := 0; i < 100; i++ {
			r.Record(Pending{})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Record blocked")
	}
	if r.Dropped() < 90 {
		t.Fatalf("dropped %d", r.Dropped())
	}
	close(w.block)
	r.Close()
	if got := int64(w.total()) + r.Dropped(); got != 100 {
		t.Fatalf("written+dropped = %d", got)
	}
}

func TestRecorderCloseDrains(t *testing.T) {
	t.Parallel()
	w := &memWriter{}
	r := NewRecorder(w, Options{BatchSize: 1000, FlushInterval: time.Hour})
	for i := 0; i < 7; i++ {
		r.Record(Pending{})
	}
	r.Close()
	if w.total() != 7 {
		t.Fatalf("close wrote %d", w.total())
	}
}

func TestExtractStreamUsage(t *testing.T) {
	t.Parallel()
	p := Pending{SSE: [][]byte{
		[]byte(`data: {"type":"message_start","message":{"usage":{"input_tokens":10,"cache_creation_input_tokens":3,"cache_read_input_tokens":2,"output_tokens":1}}}`),
		[]byte(`data: {"type":"message_delta","usage":{"output_tokens":42}}`),
		[]byte(`data: not json`),
	}}
	Extract(&p)
	e := p.Event
	if e.InputTokens != 10 || e.OutputTokens != 42 || e.CacheCreationInputTokens != 3 || e.CacheReadInputTokens != 2 {
		t.Fatalf("%+v", e)
	}
}

// A failing database does not lose usage: the batch is retried on the next flush.
func TestRecorderRetriesFailedBatch(t *testing.T) {
	t.Parallel()
	w := &memWriter{fail: true}
	r := NewRecorder(w, Options{BatchSize: 100, FlushInterval: time.Hour})
	defer r.Close()
	for i := 0; i < 5; i++ {
		r.Record(Pending{})
	}
	r.Flush(context.Background())
	if w.total() != 0 || r.Written() != 0 {
		t.Fatal("written while failing")
	}
	w.mu.Lock()
	w.fail = false
	w.mu.Unlock()
	r.Record(Pending{})
	r.Flush(context.Background())
	if w.total() != 6 || r.Dropped() != 0 {
		t.Fatalf("after recovery written %d dropped %d", w.total(), r.Dropped())
	}
}

// OnEvent sees each event with its token counts filled in (principal
// token limits count them).
func TestRecorderOnEventSeesTokens(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []store.RequestEvent
	r := NewRecorder(&memWriter{}, Options{FlushInterval: time.Hour, OnEvent: func(ev store.RequestEvent) {
		mu.Lock()
		seen = append(seen, ev)
		mu.Unlock()
	}})
	defer r.Close()
	r.Record(Pending{Event: store.RequestEvent{PrincipalID: "pr_a"}, Body: []byte(`{"usage":{"input_tokens":3,"output_tokens":4,"cache_creation_input_tokens":5}}`)})
	r.Flush(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].PrincipalID != "pr_a" || seen[0].InputTokens != 3 || seen[0].OutputTokens != 4 || seen[0].CacheCreationInputTokens != 5 {
		t.Fatalf("OnEvent saw %+v", seen)
	}
}

// The TTL split of cache writes is read from the usage's cache_creation,
// in a JSON answer and in a stream.
func TestExtractCacheWriteTTL(t *testing.T) {
	t.Parallel()
	p := Pending{Body: []byte(`{"usage":{"input_tokens":1,"cache_creation_input_tokens":30,"cache_creation":{"ephemeral_5m_input_tokens":10,"ephemeral_1h_input_tokens":20},"output_tokens":2}}`)}
	Extract(&p)
	if p.Event.CacheCreationInputTokens != 30 || p.Event.CacheCreation1hInputTokens != 20 {
		t.Fatalf("json %+v", p.Event)
	}
	s := Pending{SSE: [][]byte{
		[]byte(`data: {"type":"message_start","message":{"usage":{"input_tokens":1,"cache_creation_input_tokens":7,"cache_creation":{"ephemeral_5m_input_tokens":0,"ephemeral_1h_input_tokens":7},"output_tokens":1}}}`),
		[]byte(`data: {"type":"message_delta","usage":{"output_tokens":3}}`),
	}}
	Extract(&s)
	if s.Event.CacheCreation1hInputTokens != 7 || s.Event.OutputTokens != 3 {
		t.Fatalf("stream %+v", s.Event)
	}
	// Without the split every write is a 5-minute one.
	n := Pending{Body: []byte(`{"usage":{"cache_creation_input_tokens":9}}`)}
	Extract(&n)
	if n.Event.CacheCreation1hInputTokens != 0 || n.Event.CacheCreationInputTokens != 9 {
		t.Fatalf("no split %+v", n.Event)
	}
}

// Price runs on the recorder's goroutine after extraction, so the cost is
// stored with the event and OnEvent sees it (budgets count it).
func TestRecorderPricesBeforeOnEventAndWrite(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []store.RequestEvent
	w := &memWriter{}
	r := NewRecorder(w, Options{FlushInterval: time.Hour,
		Price: func(ev *store.RequestEvent) {
			c := ev.InputTokens * 1000
			ev.CostNanos, ev.PriceVersion = &c, "v1"
		},
		OnEvent: func(ev store.RequestEvent) {
			mu.Lock()
			seen = append(seen, ev)
			mu.Unlock()
		}})
	defer r.Close()
	r.Record(Pending{Body: []byte(`{"usage":{"input_tokens":3}}`)})
	r.Flush(context.Background())
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 1 || seen[0].CostNanos == nil || *seen[0].CostNanos != 3000 {
		t.Fatalf("OnEvent saw %+v", seen)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if got := w.batches[0][0]; got.CostNanos == nil || *got.CostNanos != 3000 || got.PriceVersion != "v1" {
		t.Fatalf("written %+v", got)
	}
}

// Record hands events over without waking the writer per request: they
// wait for the flush interval (or Flush) until a batch is full, and a full
// batch is written at once, without either.
func TestRecorderWakesTheWriterPerBatchNotPerRequest(t *testing.T) {
	t.Parallel()
	w := &memWriter{}
	var mu sync.Mutex
	seen := 0
	r := NewRecorder(w, Options{BatchSize: 10, FlushInterval: time.Hour, OnEvent: func(store.RequestEvent) { mu.Lock(); seen++; mu.Unlock() }})
	defer r.Close()
	for i := 0; i < 9; i++ {
		r.Record(Pending{})
	}
	time.Sleep(50 * time.Millisecond) // the writer would have taken them by now if woken
	mu.Lock()
	if seen != 0 {
		t.Fatalf("the writer took %d events before the batch was full or the interval passed", seen)
	}
	mu.Unlock()
	r.Record(Pending{})
	waitfor.True(t, "the full batch written without Flush", func() bool { return w.total() == 10 })
}

// The flush interval bounds how long an event waits (docs/operations.md,
// crash windows): with no Flush and no full batch it is written on the tick.
func TestRecorderWritesWithinTheFlushInterval(t *testing.T) {
	t.Parallel()
	w := &memWriter{}
	r := NewRecorder(w, Options{BatchSize: 1000, FlushInterval: 20 * time.Millisecond})
	defer r.Close()
	r.Record(Pending{})
	waitfor.True(t, "the event written on the flush tick", func() bool { return w.total() == 1 })
}

// Record after Close drops the event (counted) instead of panicking.
func TestRecordAfterCloseIsDropped(t *testing.T) {
	t.Parallel()
	r := NewRecorder(&memWriter{}, Options{})
	r.Close()
	r.Record(Pending{})
	if r.Dropped() != 1 {
		t.Fatalf("dropped %d", r.Dropped())
	}
}

// tickedRecorder is a recorder whose writes come only when tick is
// called: tick runs the clock to the next write and returns once the
// writer waits for the one after (the write done).
func tickedRecorder(t *testing.T, w Writer, o Options) (r *Recorder, tick func()) {
	t.Helper()
	clk := fakeclock.New(time.Time{})
	o.Clock = clk
	r = NewRecorder(w, o)
	if d := <-clk.Armed(); d != r.every {
		t.Fatalf("the writer waits %v, want its write period %v", d, r.every)
	}
	return r, func() {
		clk.Advance(r.every)
		<-clk.Armed()
	}
}

// The default writes come several times per flush interval, never less
// often than once per interval: the bound of docs/operations.md ("Crash
// windows") holds whatever WriteEvery says.
func TestRecorderWritePeriodWithinTheFlushInterval(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		o    Options
		want time.Duration
	}{
		{Options{}, 50 * time.Millisecond},
		{Options{FlushInterval: time.Second}, 250 * time.Millisecond},
		{Options{FlushInterval: time.Second, WriteEvery: 100 * time.Millisecond}, 100 * time.Millisecond},
		{Options{FlushInterval: time.Second, WriteEvery: time.Minute}, time.Second},
	} {
		r := NewRecorder(&memWriter{}, c.o)
		if r.every != c.want {
			t.Errorf("%+v: writes every %v, want %v", c.o, r.every, c.want)
		}
		r.Close()
	}
}

// Each write tick stores, in one transaction, everything recorded before
// it; what a crash loses is only what was recorded since the last tick (the
// docs' bound: one write period's worth, at most a batch, plus requests cut
// by the crash).
func TestRecorderEachTickWritesWhatWasQueued(t *testing.T) {
	t.Parallel()
	w := &memWriter{}
	r, tick := tickedRecorder(t, w, Options{})
	defer r.Close()
	for range 3 {
		r.Record(Pending{Event: store.RequestEvent{Model: "before"}})
	}
	tick()
	for range 2 {
		r.Record(Pending{Event: store.RequestEvent{Model: "after"}})
	}
	// A crash here: the stored batches are what survives it.
	w.mu.Lock()
	stored := append([][]store.RequestEvent(nil), w.batches...)
	w.mu.Unlock()
	if len(stored) != 1 || len(stored[0]) != 3 || stored[0][0].Model != "before" || r.Written() != 3 {
		t.Fatalf("stored before the crash %v (written %d), want the 3 events recorded before the tick in one batch", stored, r.Written())
	}
	tick()
	if w.total() != 5 || len(w.batches) != 2 {
		t.Fatalf("after the next tick: %d events in %d batches, want 5 in 2", w.total(), len(w.batches))
	}
	tick() // nothing queued: no empty transaction
	if len(w.batches) != 2 {
		t.Fatalf("an idle tick wrote a batch: %d batches", len(w.batches))
	}
}

// A full batch is written without waiting for a tick, so no more than a
// batch is held unwritten: the writer is woken by the first shard holding
// its share (by a batch at the latest, whichever shards the events fell
// in) and writes what it takes at once. It used to keep what it took
// until a whole batch had been taken, which, when it woke early, could be
// a batch and more.
func TestRecorderWritesAFullBatchWithoutATick(t *testing.T) {
	t.Parallel()
	for _, batch := range []int{32, 256} {
		w := &memWriter{wrote: make(chan int, 1024)}
		r, _ := tickedRecorder(t, w, Options{BatchSize: batch})
		for range batch {
			r.Record(Pending{})
			// Let the writer take a shard as soon as it wakes, as it does
			// under a slow trickle of requests.
			waitTaken(t, r)
		}
		select {
		case n := <-w.wrote:
			if n < batch/len(r.shards) || n > batch {
				t.Errorf("batch %d: first write of %d events", batch, n)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("batch %d: %d events recorded and none written without a tick", batch, batch)
		}
		r.Close()
	}
}

// waitTaken waits until no shard holds its wake-up share any more.
func waitTaken(t *testing.T, r *Recorder) {
	t.Helper()
	for i := range r.shards {
		sh := &r.shards[i]
		waitfor.Until(t, fmt.Sprintf("the writer to take shard %d", i), func() error {
			sh.mu.Lock()
			n := len(sh.queue)
			sh.mu.Unlock()
			if n >= r.wakeAt {
				return fmt.Errorf("%d events queued", n)
			}
			return nil
		})
	}
}

// Record does not wait on a busy shard while another is free: with every
// shard but the last held (by other requests, or the writer taking them),
// the event goes to the free one at once. Were Record to wait, the test
// would hang rather than pass.
func TestRecordTakesAFreeShard(t *testing.T) {
	w := &memWriter{}
	r := NewRecorder(w, Options{BatchSize: 256, FlushInterval: time.Hour})
	defer r.Close()
	if len(r.shards) < 2 {
		t.Fatalf("%d shards", len(r.shards))
	}
	last := len(r.shards) - 1
	for i := range last {
		r.shards[i].mu.Lock()
	}
	for range 5 {
		r.Record(Pending{Event: store.RequestEvent{Model: "m"}})
	}
	for i := range last {
		r.shards[i].mu.Unlock()
	}
	r.shards[last].mu.Lock()
	n := len(r.shards[last].queue)
	r.shards[last].mu.Unlock()
	if n != 5 {
		t.Fatalf("the free shard queued %d of 5", n)
	}
	r.Flush(context.Background())
	if got := w.total(); got != 5 {
		t.Fatalf("wrote %d of 5", got)
	}
}

// countWriter stores nothing: it counts, without allocating.
type countWriter struct{ n atomic.Int64 }

func (c *countWriter) InsertRequestEvents(_ context.Context, evs []store.RequestEvent) error {
	c.n.Add(int64(len(evs)))
	return nil
}

// The writer takes queued events without allocating per event (with a
// Price hook, as bin/proxy has: a Pending copied for it escaped to the
// heap, one allocation per request). Not parallel: the count is the
// process's.
func TestRecorderTakesEventsWithoutAllocating(t *testing.T) {
	if raceEnabled {
		t.Skip("allocation counts mean nothing under the race detector")
	}
	w := &countWriter{}
	r := NewRecorder(w, Options{QueueSize: 8192, BatchSize: 4096, FlushInterval: time.Hour,
		Price: func(ev *store.RequestEvent) { ev.PriceVersion = "v1" }})
	defer r.Close()
	const n = 1000
	round := func() {
		for range n {
			r.Record(Pending{Event: store.RequestEvent{Model: "m", Status: 200}})
		}
		r.Flush(context.Background())
	}
	round() // the shards' queues and the writer's batch grow once
	round()
	var before, after runtime.MemStats
	for range n {
		r.Record(Pending{Event: store.RequestEvent{Model: "m", Status: 200}})
	}
	runtime.ReadMemStats(&before)
	r.Flush(context.Background())
	runtime.ReadMemStats(&after)
	if got := w.n.Load(); got != 3*n {
		t.Fatalf("wrote %d of %d", got, 3*n)
	}
	// Flush's own channel and the write's context allocate a few times.
	if allocs := after.Mallocs - before.Mallocs; allocs > n/10 {
		t.Errorf("%d allocations taking %d events", allocs, n)
	}
}
