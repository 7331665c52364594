package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"

	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

// neverPoll stands for a poll interval no test outlives: a job that runs
// was woken by something else than the producer's poll.
const neverPoll = time.Hour

// wakeBound is how late after its due time a woken job may start in these
// tests: far below neverPoll, loose enough for a loaded 2-core machine.
const wakeBound = 20 * time.Second

// openSQLiteScheduler opens a scheduler on the SQLite file at path whose
// one job type records when each attempt started.
func openSQLiteScheduler(t *testing.T, path string, class RetryClass, handler func(attempt int) error, runs chan<- time.Time) *Scheduler {
	t.Helper()
	typ := Type{Name: "test:alarm", Class: class, Handler: func(_ context.Context, j Job) (Outcome, error) {
		runs <- time.Now()
		if err := handler(j.Attempt); err != nil {
			return "", err
		}
		return OutcomeDone, nil
	}}
	s, err := NewSQLite(context.Background(), openSQLite(t, path), []Type{typ},
		Options{Metrics: NewMetrics(prometheus.NewRegistry()), PollInterval: neverPoll})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func startScheduler(t *testing.T, s *Scheduler) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		s.Stop(ctx)
	})
}

// awaitRun returns when the next attempt started, failing past deadline.
func awaitRun(t *testing.T, runs <-chan time.Time, deadline time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-runs:
		return at
	case <-time.After(time.Until(deadline)):
		t.Fatalf("%s: did not run by %s (the poll interval is %s)", what, deadline.Format(time.RFC3339Nano), neverPoll)
		return time.Time{}
	}
}

func ok(int) error { return nil }

// On SQLite River fetches right after this process inserts a job due now,
// so a long poll interval does not delay it. The alarm rests on that
// fetch (ringing is an insert): were River to stop fetching after an
// insert, this test would be the first to say so.
func TestSQLiteJobDueNowRunsDespiteLongPoll(t *testing.T) {
	t.Parallel()
	runs := make(chan time.Time, 4)
	s := openSQLiteScheduler(t, filepath.Join(t.TempDir(), "s.db"), fast, ok, runs)
	startScheduler(t, s)
	enqueued := time.Now()
	if _, _, err := s.Enqueue(context.Background(), Enqueue{Type: "test:alarm", IdempotencyKey: "now"}); err != nil {
		t.Fatal(err)
	}
	at := awaitRun(t, runs, enqueued.Add(wakeBound), "job due now")
	t.Logf("started %s after the enqueue", at.Sub(enqueued))
}

// A job scheduled for later runs at its due time, not at the next poll:
// the alarm wakes the producer (without it this job would wait an hour).
func TestSQLiteJobDueLaterRunsByItsDueTime(t *testing.T) {
	t.Parallel()
	runs := make(chan time.Time, 4)
	s := openSQLiteScheduler(t, filepath.Join(t.TempDir(), "s.db"), fast, ok, runs)
	startScheduler(t, s)
	due := time.Now().Add(3 * time.Second)
	if _, _, err := s.Enqueue(context.Background(), Enqueue{Type: "test:alarm", IdempotencyKey: "later", RunAt: due}); err != nil {
		t.Fatal(err)
	}
	at := awaitRun(t, runs, due.Add(wakeBound), "job due in 3 s")
	if at.Before(due.Add(-time.Millisecond)) { // River stores times to the microsecond
		t.Fatalf("ran %s before its due time", due.Sub(at))
	}
	t.Logf("started %s after its due time", at.Sub(due))
}

// A retry is due later too: the retry policy arms its time.
func TestSQLiteRetryRunsByItsDueTime(t *testing.T) {
	t.Parallel()
	runs := make(chan time.Time, 4)
	class := RetryClass{Name: "slow", MaxAttempts: 2, Base: 2 * time.Second, Max: 2 * time.Second}
	fail := func(attempt int) error {
		if attempt == 1 {
			return errors.New("transient")
		}
		return nil
	}
	s := openSQLiteScheduler(t, filepath.Join(t.TempDir(), "s.db"), class, fail, runs)
	startScheduler(t, s)
	if _, _, err := s.Enqueue(context.Background(), Enqueue{Type: "test:alarm", IdempotencyKey: "retry"}); err != nil {
		t.Fatal(err)
	}
	first := awaitRun(t, runs, time.Now().Add(wakeBound), "first attempt")
	second := awaitRun(t, runs, first.Add(class.Max+wakeBound), "retry")
	if d := second.Sub(first); d < time.Duration(float64(class.Base)*(1-JitterFraction)) {
		t.Fatalf("retried after %s, before its delay", d)
	}
	t.Logf("retried %s after the first attempt (delay %s ± 10%%)", second.Sub(first), class.Base)
}

// Jobs queued before this process started (by an earlier one on the same
// file) are armed at Start.
func TestSQLiteJobQueuedBeforeStartRunsByItsDueTime(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "s.db")
	var ranEarly atomic.Bool
	earlier := openSQLiteScheduler(t, path, fast, ok, make(chan time.Time, 1))
	due := time.Now().Add(4 * time.Second)
	if _, _, err := earlier.Enqueue(context.Background(), Enqueue{Type: "test:alarm", IdempotencyKey: "queued", RunAt: due}); err != nil {
		t.Fatal(err)
	}
	// earlier never starts: only the next process can run the job.
	runs := make(chan time.Time, 4)
	s := openSQLiteScheduler(t, path, fast, func(int) error {
		if time.Now().Before(due) {
			ranEarly.Store(true)
		}
		return nil
	}, runs)
	startScheduler(t, s)
	at := awaitRun(t, runs, due.Add(wakeBound), "job queued before start")
	if ranEarly.Load() {
		t.Fatal("ran before its due time")
	}
	t.Logf("started %s after its due time", at.Sub(due))
}

func TestAlarmRingsAtDueTimesAndFollowsUp(t *testing.T) {
	t.Parallel()
	rang := make(chan time.Time, 8)
	a := newAlarm(slog.New(slog.DiscardHandler), func(context.Context) error { rang <- time.Now(); return nil }, neverPoll)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.run(ctx)
	start := time.Now()
	a.arm(start.Add(-time.Second), 0) // due already: River's insert fetched it
	a.arm(start.Add(300*time.Millisecond), 0)
	a.arm(start.Add(100*time.Millisecond), 0) // earlier than the armed one: re-arms the timer
	want := []time.Duration{100 * time.Millisecond, 300 * time.Millisecond, 100*time.Millisecond + followUpAfter}
	for i, w := range want {
		select {
		case at := <-rang:
			if d := at.Sub(start); d < w {
				t.Fatalf("ring %d after %s, before its due time %s", i, d, w)
			}
		case <-time.After(wakeBound):
			t.Fatalf("ring %d (due after %s) did not come", i, w)
		}
	}
	// The follow-up of the 300 ms wake was folded into the one above or
	// comes next; either way no ring is left for the past time.
	a.mu.Lock()
	n := len(a.due)
	a.mu.Unlock()
	if n > 1 {
		t.Fatalf("%d wakes still armed, want at most one follow-up", n)
	}
}

// River's job scheduler may make a job available only after its due time
// (it ticks every 5 s, looking 5 s ahead, so a job due sooner than that
// after its insert can miss the tick before it; the first tick waits for
// leadership). The alarm then keeps waking the producer until the job
// starts, and stops once it has.
func TestAlarmFollowsAJobUntilItStarts(t *testing.T) {
	t.Parallel()
	const availableAfter = 4 // rings before the job is available
	var a *alarm
	var rings atomic.Int32
	begun := make(chan struct{})
	a = newAlarm(slog.New(slog.DiscardHandler), func(context.Context) error {
		if rings.Add(1) == availableAfter {
			a.started(7) // the producer fetched it: its attempt began
			close(begun)
		}
		return nil
	}, neverPoll)
	a.followUp = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.run(ctx)
	a.arm(time.Now().Add(50*time.Millisecond), 7)
	select {
	case <-begun:
	case <-time.After(wakeBound):
		t.Fatalf("the job never started: %d rings, the alarm stopped following it", rings.Load())
	}
	waitfor.True(t, "the follow-ups to stop once the job started", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.due) == 0 && len(a.waiting) == 0 && !a.followUpArmed
	})
}

// A job that never starts here (another process took it, or every worker
// is busy) is followed only for the poll interval: past it the producer's
// own poll finds it.
func TestAlarmStopsFollowingAfterThePollInterval(t *testing.T) {
	t.Parallel()
	var rings atomic.Int32
	a := newAlarm(slog.New(slog.DiscardHandler), func(context.Context) error { rings.Add(1); return nil }, 200*time.Millisecond)
	a.followUp = 20 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.run(ctx)
	a.arm(time.Now().Add(10*time.Millisecond), 9)
	waitfor.True(t, "the alarm to give the job up", func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return rings.Load() > 1 && len(a.due) == 0 && len(a.waiting) == 0 && !a.followUpArmed
	})
}

// A job whose RunAt has already come (the current cron tick at start-up, a
// warm-up due at once) is fetched right after its insert, and keeps its
// RunAt as scheduled time.
func TestSQLiteJobDueInThePastRunsAtOnce(t *testing.T) {
	t.Parallel()
	runs := make(chan time.Time, 4)
	s := openSQLiteScheduler(t, filepath.Join(t.TempDir(), "s.db"), fast, ok, runs)
	startScheduler(t, s)
	runAt := time.Now().Add(-time.Minute).Truncate(time.Second)
	enqueued := time.Now()
	_, id, err := s.Enqueue(context.Background(), Enqueue{Type: "test:alarm", IdempotencyKey: "past", RunAt: runAt})
	if err != nil {
		t.Fatal(err)
	}
	at := awaitRun(t, runs, enqueued.Add(wakeBound), "job due a minute ago")
	t.Logf("started %s after the enqueue", at.Sub(enqueued))
	if got := waitState(t, s, id).ScheduledAt; !got.Equal(runAt) {
		t.Fatalf("scheduled at %s, want its RunAt %s", got, runAt)
	}
}

// The doorbell row is the alarm's, not a gateway job: the admin API's
// cancel and delete, which take any job id, leave it alone.
func TestDoorbellIsNotAGatewayJob(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := openSQLiteScheduler(t, filepath.Join(t.TempDir(), "s.db"), fast, ok, make(chan time.Time, 4))
	startScheduler(t, s)
	if err := s.ring(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := s.client.JobList(ctx, river.NewJobListParams().Kinds(doorbellKind).States(allStates...))
	if err != nil || len(res.Jobs) != 1 {
		t.Fatalf("doorbell rows: %v, %v", res, err)
	}
	id := res.Jobs[0].ID
	if err := s.Cancel(ctx, id); !errors.Is(err, river.ErrNotFound) {
		t.Errorf("cancel of the doorbell row: %v", err)
	}
	if n, err := s.DeleteJobs(ctx, []int64{id}); err != nil || n != 0 {
		t.Errorf("delete of the doorbell row: %d deleted, %v", n, err)
	}
	if j, err := s.client.JobGet(ctx, id); err != nil || j.State != rivertype.JobStatePending {
		t.Errorf("the doorbell row after both: %+v, %v", j, err)
	}
}
