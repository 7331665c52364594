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
	// followUpAfter spaces the wakes after a due time while the job has
	// not started. River's job scheduler makes a scheduled job available on
	// its 5 s tick, looking 5 s ahead: a job due sooner than that after its
	// insert (a short retry, a job enqueued for 3 s later) may become
	// available only after its due time, and the first tick after start-up
	// waits for leadership. Nothing tells the producer then, so the alarm
	// keeps ringing until the job starts (or the poll would find it anyway).
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
	// followUp spaces the wakes after a due time (followUpAfter); giveUp is
	// how long past its due time a job is followed: the poll interval, after
	// which the producer's own poll has found it.
	followUp, giveUp time.Duration

	mu  sync.Mutex
	due dueHeap
	// waiting holds the jobs whose due time has passed and that have not
	// started, by id, with their due times.
	waiting map[int64]time.Time
	// followUpArmed: one follow-up is in due; one chain serves every job.
	followUpArmed bool
}

func newAlarm(log *slog.Logger, ring func(ctx context.Context) error, giveUp time.Duration) *alarm {
	return &alarm{ring: ring, log: log, changed: make(chan struct{}, 1),
		followUp: followUpAfter, giveUp: giveUp, waiting: map[int64]time.Time{}}
}

// arm schedules a wake at at for job id (0: a time, no job to follow).
// Times not in the future need none: River fetches right after an insert
// of a job due now.
func (a *alarm) arm(at time.Time, id int64) {
	if !at.After(time.Now()) {
		return
	}
	a.push(dueAt{at: at, id: id})
}

// follow keeps waking for job id, already due at due (a job found
// overdue at start-up), until it starts.
func (a *alarm) follow(due time.Time, id int64) {
	a.mu.Lock()
	if len(a.waiting) < maxArmed {
		a.waiting[id] = due
	}
	again := !a.followUpArmed
	a.followUpArmed = true
	a.mu.Unlock()
	if again {
		a.push(dueAt{at: time.Now().Add(a.followUp), followUp: true})
	}
}

// started ends the follow-up of job id: its attempt began.
func (a *alarm) started(id int64) {
	a.mu.Lock()
	delete(a.waiting, id)
	a.mu.Unlock()
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

// popDue removes the times reached by now and reports whether any was.
// A first wake leaves a follow-up behind; follow-ups go on while a job
// woken for has not started, for at most giveUp past its due time.
func (a *alarm) popDue(now time.Time) bool {
	a.mu.Lock()
	popped, first := false, false
	for len(a.due) > 0 && !a.due[0].at.After(now) {
		d := heap.Pop(&a.due).(dueAt)
		popped = true
		first = first || !d.followUp
		if d.followUp {
			a.followUpArmed = false
		}
		if d.id != 0 && len(a.waiting) < maxArmed {
			a.waiting[d.id] = d.at
		}
	}
	for id, due := range a.waiting {
		if now.Sub(due) > a.giveUp {
			delete(a.waiting, id)
		}
	}
	again := popped && (first || len(a.waiting) > 0) && !a.followUpArmed
	a.followUpArmed = a.followUpArmed || again
	a.mu.Unlock()
	if again {
		a.push(dueAt{at: now.Add(a.followUp), followUp: true})
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
	id       int64 // the job woken for; 0: none known
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
