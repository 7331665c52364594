package scheduler

import (
	"container/heap"
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/riverqueue/river"
)

// SQLitePollInterval is how often River's producer looks for due jobs on
// SQLite when Options.PollInterval is zero. Each look is a write statement
// run by the pure-Go SQLite engine in the proxy's own process (about 1 ms
// of CPU), so it is kept rare; the alarm below wakes the producer at the
// due times this process knows of, and the poll only bounds the delay of
// the jobs it does not (docs/decisions.md, Scheduler).
const SQLitePollInterval = 5 * time.Second

const (
	// followUpAfter: a second wake after each due time, for a job River's
	// job scheduler made available a little late (its 5 s tick delayed by
	// load, or the first tick after start-up, which waits for leadership
	// and a stagger of up to 1 s).
	followUpAfter = 1500 * time.Millisecond
	// maxArmed bounds the due times held; past it the poll covers the rest.
	maxArmed = 100_000
	// armFromTableLimit is how many queued jobs Start reads to arm their due
	// times (jobs enqueued before this process started).
	armFromTableLimit = 1000
)

// doorbellKind is a River kind of its own, outside every listing of the
// gateway's jobs (they filter on Kind). Its one row stays Pending: never
// worked, never cleaned.
const doorbellKind = "pillar_scheduler_doorbell"

type doorbellArgs struct{}

func (doorbellArgs) Kind() string { return doorbellKind }

// doorbellWorker exists because River refuses to insert a kind without a
// worker; the Pending row is never handed to it.
type doorbellWorker struct {
	river.WorkerDefaults[doorbellArgs]
}

func (doorbellWorker) Work(context.Context, *river.Job[doorbellArgs]) error { return nil }

// alarm wakes River's producer at the due times of jobs this process
// enqueued (or found queued at start-up). SQLite has no LISTEN/NOTIFY:
// River's job scheduler makes a scheduled job available ahead of its due
// time but tells no producer, so without the alarm the job would wait for
// the next poll. River fetches at once after every Insert from this
// process, duplicates included, so ringing is inserting the doorbell row
// again: a unique duplicate, skipped, that makes the local producer fetch.
// It reads the wall clock, not Options.Now: a job becomes available by
// River's clock, which is the wall clock; Options.Now only picks cron ticks.
type alarm struct {
	ring    func(ctx context.Context) error
	log     *slog.Logger
	changed chan struct{}

	mu  sync.Mutex
	due dueHeap
}

func newAlarm(log *slog.Logger, ring func(ctx context.Context) error) *alarm {
	return &alarm{ring: ring, log: log, changed: make(chan struct{}, 1)}
}

// arm schedules a wake at at. Times not in the future need none: River
// fetches right after an insert of a job due now.
func (a *alarm) arm(at time.Time) {
	if !at.After(time.Now()) {
		return
	}
	a.push(dueAt{at: at})
}

func (a *alarm) push(d dueAt) {
	a.mu.Lock()
	if len(a.due) >= maxArmed {
		a.mu.Unlock()
		return
	}
	heap.Push(&a.due, d)
	first := a.due[0] == d
	a.mu.Unlock()
	if first {
		select {
		case a.changed <- struct{}{}:
		default:
		}
	}
}

func (a *alarm) next() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.due) == 0 {
		return time.Time{}, false
	}
	return a.due[0].at, true
}

// popDue removes the times reached by now and reports whether any was;
// a first wake leaves a follow-up behind.
func (a *alarm) popDue(now time.Time) bool {
	a.mu.Lock()
	popped, followUp := false, false
	for len(a.due) > 0 && !a.due[0].at.After(now) {
		d := heap.Pop(&a.due).(dueAt)
		popped = true
		followUp = followUp || !d.followUp
	}
	a.mu.Unlock()
	if followUp {
		a.push(dueAt{at: now.Add(followUpAfter), followUp: true})
	}
	return popped
}

// run rings at each due time until ctx ends.
func (a *alarm) run(ctx context.Context) {
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		var fire <-chan time.Time
		if at, ok := a.next(); ok {
			t.Reset(max(time.Until(at), 0))
			fire = t.C
		}
		select {
		case <-ctx.Done():
			return
		case <-a.changed:
			t.Stop()
		case <-fire:
			if a.popDue(time.Now()) {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if err := a.ring(rctx); err != nil && ctx.Err() == nil {
					// The poll still finds the job; nothing is lost.
					a.log.Debug("scheduler alarm: could not wake the producer", "error", err)
				}
				cancel()
			}
		}
	}
}

type dueAt struct {
	at       time.Time
	followUp bool
}

type dueHeap []dueAt

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueAt)) }
func (h *dueHeap) Pop() any {
	old := *h
	d := old[len(old)-1]
	*h = old[:len(old)-1]
	return d
}
