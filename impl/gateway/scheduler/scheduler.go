// Package scheduler is the durable background scheduler: jobs live in the
// database (River, on PostgreSQL or SQLite), one row per (job_type,
// idempotency_key), claimed by any worker on any replica, retried by the
// job type's retry class. Every replica runs its own cron producer that
// pushes each tick under an idempotency key derived from the tick, so the
// unique constraint keeps exactly one job per tick.
package scheduler

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	"go.opentelemetry.io/otel/trace"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/service"
)

// Kind is the River kind every gateway job is stored under; the job type
// travels in the args, so one worker dispatches every type.
const Kind = "pillar_job"

// Args is the stored payload of a job. Payloads carry metadata only, never
// prompts or credentials.
type Args struct {
	JobType        string          `json:"job_type" river:"unique"`
	IdempotencyKey string          `json:"idempotency_key" river:"unique"`
	Payload        json.RawMessage `json:"payload,omitempty"`
}

// Kind implements river.JobArgs.
func (Args) Kind() string { return Kind }

// Outcome lets a handler report that it did nothing useful without failing.
type Outcome string

const (
	OutcomeDone Outcome = "done"
	// OutcomeSkip: the job's preconditions did not hold (e.g. a window is
	// already active); nothing was done, by design.
	OutcomeSkip Outcome = "skip"
	// OutcomeNoop: the job found its work already done or stale.
	OutcomeNoop Outcome = "noop"
)

// Job is what a handler receives.
type Job struct {
	ID             int64
	Type           string
	IdempotencyKey string
	Payload        json.RawMessage
	Attempt        int
	MaxAttempts    int
	ScheduledAt    time.Time
}

// Handler runs one job type.
type Handler func(ctx context.Context, job Job) (Outcome, error)

// ErrPermanent wraps an error that must not be retried: the job fails now.
var ErrPermanent = errors.New("permanent failure")

// Type registers one job type.
type Type struct {
	Name    string
	Class   RetryClass
	Handler Handler
	// Timeout bounds one attempt; zero means one minute.
	Timeout time.Duration
	// Every, when non-zero, makes every replica's cron producer push a job
	// of this type at each multiple of Every (unix time), keyed by the tick.
	Every time.Duration
	// Payload is the payload of cron-pushed jobs.
	Payload json.RawMessage
}

// Enqueue requests one job.
type Enqueue struct {
	Type           string
	IdempotencyKey string
	Payload        json.RawMessage
	// RunAt schedules the job; zero runs it as soon as a worker is free.
	RunAt time.Time
}

// States as the seed names them. River's states map onto them: scheduled and
// pending are Pending, available and retryable Queued (waiting for a worker),
// running Running, completed Done, discarded (attempts exhausted) Failed,
// cancelled Killed.
const (
	StatePending = "Pending"
	StateQueued  = "Queued"
	StateRunning = "Running"
	StateDone    = "Done"
	StateFailed  = "Failed"
	StateKilled  = "Killed"
)

// StateOf maps a River job state to the seed's.
func StateOf(s rivertype.JobState) string {
	switch s {
	case rivertype.JobStateScheduled, rivertype.JobStatePending:
		return StatePending
	case rivertype.JobStateAvailable, rivertype.JobStateRetryable:
		return StateQueued
	case rivertype.JobStateRunning:
		return StateRunning
	case rivertype.JobStateCompleted:
		return StateDone
	case rivertype.JobStateDiscarded:
		return StateFailed
	case rivertype.JobStateCancelled:
		return StateKilled
	}
	return string(s)
}

// allStates makes uniqueness cover terminal rows too: a completed cycle key
// can never be enqueued again, and new work needs a new key.
var allStates = []rivertype.JobState{
	rivertype.JobStateAvailable, rivertype.JobStateCancelled, rivertype.JobStateCompleted,
	rivertype.JobStateDiscarded, rivertype.JobStatePending, rivertype.JobStateRetryable,
	rivertype.JobStateRunning, rivertype.JobStateScheduled,
}

// client is the part of river.Client[TTx] the scheduler uses; it hides the
// driver's transaction type.
type client interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Insert(ctx context.Context, args river.JobArgs, opts *river.InsertOpts) (*rivertype.JobInsertResult, error)
	JobList(ctx context.Context, params *river.JobListParams) (*river.JobListResult, error)
	JobGet(ctx context.Context, id int64) (*rivertype.JobRow, error)
	JobCancel(ctx context.Context, jobID int64) (*rivertype.JobRow, error)
	JobDeleteMany(ctx context.Context, params *river.JobDeleteManyParams) (*river.JobDeleteManyResult, error)
}

// Scheduler owns the River client, the handlers and the cron producer.
type Scheduler struct {
	service.Base
	metrics *Metrics
	types   map[string]*Type
	client  client
	// rescueAfter is how long a running job may go before it is rescued.
	rescueAfter time.Duration
	tracer      trace.Tracer // nil: job runs are not traced
	// alarm wakes the producer at due times on SQLite (nil on PostgreSQL,
	// where River's LISTEN/NOTIFY does).
	alarm *alarm

	// down is why the scheduler failed to start (see Down); nil when up.
	down error

	mu       sync.Mutex
	cronNext map[string]time.Time
	stop     context.CancelFunc
	// bg counts the goroutines Start began (cron, the alarm); Stop waits.
	bg sync.WaitGroup
}

// Options configures a Scheduler.
type Options struct {
	// Logger (nil: discards) and Clock (nil: the real clock) go to
	// service.Init. The clock picks cron ticks and times runs; River
	// makes jobs available by the wall clock.
	Logger  *slog.Logger
	Clock   clock.Clock
	Metrics *Metrics
	// Workers is how many jobs this replica runs at once.
	Workers int
	// ID names this replica's River client.
	ID string
	// PollInterval is how often idle workers look for due jobs. Zero: 1 s
	// on PostgreSQL (a fallback: LISTEN/NOTIFY wakes them), SQLitePollInterval
	// on SQLite (a fallback: the alarm wakes them at known due times).
	PollInterval time.Duration
	// RescueAfter is how long a job may stay running before it is taken for
	// dead (its worker crashed) and retried by any replica, within its class.
	RescueAfter time.Duration
	// Tracer traces each job run (optional: nil traces nothing).
	Tracer trace.Tracer
}

func (o *Options) defaults() {
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.PollInterval <= 0 {
		o.PollInterval = time.Second // PostgreSQL's; NewSQLite sets its own first
	}
	if o.RescueAfter <= 0 {
		o.RescueAfter = 5 * time.Minute
	}
}

// riverConfig builds the River configuration shared by both drivers.
func (s *Scheduler) riverConfig(o Options) *river.Config {
	workers := river.NewWorkers()
	river.AddWorker(workers, &worker{s: s})
	river.AddWorker(workers, doorbellWorker{})
	return &river.Config{
		ID:                   o.ID,
		Logger:               slog.New(minLevel{s.Logger.Handler(), slog.LevelWarn}).With("component", "river"),
		Queues:               map[string]river.QueueConfig{river.QueueDefault: {MaxWorkers: o.Workers}},
		Workers:              workers,
		RetryPolicy:          retryPolicy{s},
		Hooks:                []rivertype.Hook{river.HookInsertBeginFunc(availableWhenDue)},
		FetchPollInterval:    o.PollInterval,
		FetchCooldown:        min(o.PollInterval, 100*time.Millisecond),
		JobTimeout:           min(time.Minute, o.RescueAfter),
		MaxAttempts:          Entity.MaxAttempts,
		RescueStuckJobsAfter: o.RescueAfter,
		// Terminal rows are the failure tickets and the uniqueness record;
		// pruning them is the pruning job's business, not River's.
		CompletedJobRetentionPeriod: 7 * 24 * time.Hour,
		DiscardedJobRetentionPeriod: 30 * 24 * time.Hour,
		CancelledJobRetentionPeriod: 30 * 24 * time.Hour,
	}
}

// availableWhenDue inserts a job whose RunAt has already come as available
// rather than scheduled. River makes a scheduled job available only on its
// job scheduler's next run (every 5 s), and on SQLite nothing then tells the
// producer, so a job due now (the current cron tick at start-up, a warm-up
// or refresh due at once) waited for a poll; available, it is fetched right
// after its insert (LISTEN/NOTIFY on PostgreSQL, a local fetch on SQLite).
// Its scheduled_at stays RunAt.
func availableWhenDue(_ context.Context, p *rivertype.JobInsertParams) error {
	if p.State == rivertype.JobStateScheduled && p.ScheduledAt != nil && !p.ScheduledAt.After(time.Now()) {
		p.State = rivertype.JobStateAvailable
	}
	return nil
}

func newScheduler(types []Type, o Options) (*Scheduler, error) {
	o.defaults()
	s := service.Init(service.Options{Logger: o.Logger, Clock: o.Clock}, &Scheduler{metrics: o.Metrics, types: map[string]*Type{}, cronNext: map[string]time.Time{}, rescueAfter: o.RescueAfter, tracer: o.Tracer})
	var names []string
	for i := range types {
		t := types[i]
		if t.Name == "" || t.Handler == nil || t.Class.MaxAttempts < 1 {
			return nil, fmt.Errorf("scheduler: job type %q needs a name, a handler and a retry class", t.Name)
		}
		if _, dup := s.types[t.Name]; dup {
			return nil, fmt.Errorf("scheduler: job type %q registered twice", t.Name)
		}
		s.types[t.Name] = &t
		names = append(names, t.Name)
	}
	sort.Strings(names)
	if s.metrics != nil {
		s.metrics.preRegister(names)
	}
	return s, nil
}

// Enqueue inserts a job unless a row with the same (type, key) exists.
// inserted reports whether a new row was written.
func (s *Scheduler) Enqueue(ctx context.Context, e Enqueue) (inserted bool, jobID int64, err error) {
	t, ok := s.types[e.Type]
	if !ok {
		return false, 0, fmt.Errorf("scheduler: unknown job type %q", e.Type)
	}
	if e.IdempotencyKey == "" {
		return false, 0, errors.New("scheduler: idempotency key required")
	}
	if s.down != nil {
		return false, 0, fmt.Errorf("enqueue %s: %w", e.Type, ErrUnavailable)
	}
	opts := &river.InsertOpts{
		MaxAttempts: t.Class.MaxAttempts,
		UniqueOpts:  river.UniqueOpts{ByArgs: true, ByState: allStates},
	}
	if !e.RunAt.IsZero() {
		opts.ScheduledAt = e.RunAt
	}
	res, err := s.client.Insert(ctx, Args{JobType: e.Type, IdempotencyKey: e.IdempotencyKey, Payload: e.Payload}, opts)
	if err != nil {
		return false, 0, fmt.Errorf("enqueue %s: %w", e.Type, err)
	}
	if s.alarm != nil && res.Job.State == rivertype.JobStateScheduled {
		// A duplicate too: its row may be the one still scheduled.
		s.alarm.arm(res.Job.ScheduledAt, res.Job.ID)
	}
	return !res.UniqueSkippedAsDuplicate, res.Job.ID, nil
}

// Start migrates nothing (drivers do) and starts workers and the cron producer.
func (s *Scheduler) Start(ctx context.Context) error {
	if s.down != nil {
		return fmt.Errorf("start scheduler: %w", s.down)
	}
	if err := s.client.Start(ctx); err != nil {
		if s.metrics != nil {
			s.metrics.InitFailure.Set(1)
		}
		return fmt.Errorf("start scheduler: %w", err)
	}
	if s.metrics != nil {
		s.metrics.InitFailure.Set(0)
	}
	cctx, cancel := context.WithCancel(context.Background())
	s.stop = cancel
	s.bg.Go(func() { s.cron(cctx) })
	if s.alarm != nil {
		s.armFromTable(ctx)
		s.bg.Go(func() { s.alarm.run(cctx) })
	}
	return nil
}

// ring makes River's local producer fetch now: see alarm.
func (s *Scheduler) ring(ctx context.Context) error {
	_, err := s.client.Insert(ctx, doorbellArgs{}, &river.InsertOpts{Pending: true, UniqueOpts: river.UniqueOpts{ByState: allStates}})
	return err
}

// armFromTable arms the due times of jobs queued before this process
// started (the first armFromTableLimit by due time; the poll covers the
// rest). Jobs already due are followed: woken until they start, since
// River's job scheduler makes them available only once it has leadership.
func (s *Scheduler) armFromTable(ctx context.Context) {
	res, err := s.client.JobList(ctx, river.NewJobListParams().Kinds(Kind).States(notStarted...).
		OrderBy(river.JobListOrderByScheduledAt, river.SortOrderAsc).First(armFromTableLimit))
	if err != nil {
		s.Logger.Warn("scheduler alarm: list queued jobs (the poll still finds them)", "error", err)
		return
	}
	now := time.Now()
	for _, j := range res.Jobs {
		if j.ScheduledAt.After(now) {
			s.alarm.arm(j.ScheduledAt, j.ID)
		} else {
			s.alarm.follow(now, j.ID)
		}
	}
}

// Stop stops the cron producer and waits for running jobs.
func (s *Scheduler) Stop(ctx context.Context) error {
	if s.stop != nil {
		s.stop()
		s.bg.Wait()
	}
	return s.client.Stop(ctx)
}

// TickKey is the idempotency key of the cron tick at t for a job type.
func TickKey(jobType string, tick time.Time) string {
	return fmt.Sprintf("%s:%d", jobType, tick.Unix())
}

// cron pushes each due tick of every periodic type. Every replica does the
// same; the unique (type, key) constraint keeps one job per tick.
func (s *Scheduler) cron(ctx context.Context) {
	s.PushDueTicks(ctx)
	service.Every(ctx, s.Clock, time.Second, s.PushDueTicks)
}

// PushDueTicks enqueues, for every periodic type, the current tick (due
// now) and the next two (scheduled ahead), unless this replica already
// pushed them. The tick scheduled ahead is what makes next_run_at a fact
// of the job table: while the producers and workers run, every periodic
// type has a queued job; a stall leaves it in the past. Exported so tests
// drive the producer with their clock.
func (s *Scheduler) PushDueTicks(ctx context.Context) {
	now := s.Clock.Now()
	for name, t := range s.types {
		if t.Every <= 0 {
			continue
		}
		tick := now.Truncate(t.Every)
		// Two ticks ahead: when one becomes due and runs, the next is
		// already queued, whenever this replica's producer next wakes.
		for _, at := range []time.Time{tick, tick.Add(t.Every), tick.Add(2 * t.Every)} {
			s.mu.Lock()
			pushed := !s.cronNext[name].IsZero() && !at.After(s.cronNext[name])
			s.mu.Unlock()
			if pushed {
				continue
			}
			inserted, _, err := s.Enqueue(ctx, Enqueue{Type: name, IdempotencyKey: TickKey(name, at), Payload: t.Payload, RunAt: at})
			if err != nil {
				if ctx.Err() == nil {
					s.Logger.Warn("cron push", "job_type", name, "error", err)
				}
				break
			}
			if !inserted {
				// Another replica pushed this tick first: expected, not an error.
				s.Logger.Debug("cron tick already pushed by another replica (unique violation expected)", "job_type", name, "tick", at.Unix())
			}
			s.mu.Lock()
			s.cronNext[name] = at
			s.mu.Unlock()
		}
	}
}

// notStarted are the states of a job that has not run yet (or waits to
// run again): what is really queued.
var notStarted = []rivertype.JobState{rivertype.JobStateScheduled, rivertype.JobStatePending,
	rivertype.JobStateAvailable, rivertype.JobStateRetryable}

// NextRunAt reads, for each periodic type, the earliest run time among
// its queued jobs in the job table; a type with nothing queued is absent.
// A time in the past means the job is due but no worker has taken it: the
// cron is stalled.
func (s *Scheduler) NextRunAt(ctx context.Context) (map[string]time.Time, error) {
	out := map[string]time.Time{}
	for name, t := range s.types {
		if t.Every <= 0 {
			continue
		}
		res, err := s.client.JobList(ctx, river.NewJobListParams().Kinds(Kind).States(notStarted...).
			OrderBy(river.JobListOrderByScheduledAt, river.SortOrderAsc).First(1).
			Where(`args ->> 'job_type' = @job_type`, river.NamedArgs{"job_type": name}))
		if err != nil {
			return nil, fmt.Errorf("next run of %s: %w", name, err)
		}
		if len(res.Jobs) > 0 {
			out[name] = res.Jobs[0].ScheduledAt
		}
	}
	return out, nil
}

// Types returns the registered job types.
func (s *Scheduler) Types() []Type {
	var out []Type
	for _, t := range s.types {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// worker is the single River worker; it dispatches on the job type.
type worker struct {
	river.WorkerDefaults[Args]
	s *Scheduler
}

// Timeout bounds one attempt. It never exceeds the rescue delay: a job
// still running past it would be rescued and run twice.
func (w *worker) Timeout(job *river.Job[Args]) time.Duration {
	d := time.Minute
	if t := w.s.types[job.Args.JobType]; t != nil && t.Timeout > 0 {
		d = t.Timeout
	}
	return min(d, w.s.rescueAfter)
}

func (w *worker) Work(ctx context.Context, job *river.Job[Args]) (err error) {
	s := w.s
	if s.alarm != nil {
		s.alarm.started(job.ID)
	}
	name := job.Args.JobType
	t := s.types[name]
	if t == nil {
		// A job type this build does not know: fail without retry.
		return river.JobCancel(fmt.Errorf("unknown job type %q", name))
	}
	start := s.Clock.Now()
	s.metrics.count(name, "started")
	defer func() {
		if r := recover(); r != nil {
			s.metrics.count(name, "panicked")
			s.Logger.Error("job panicked", "job_type", name, "job_id", job.ID, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", r)
			if job.Attempt >= job.MaxAttempts {
				s.metrics.failed(name)
			}
		}
		s.metrics.duration(name, s.Clock.Now().Sub(start))
	}()
	out, herr := s.handle(ctx, t, Job{
		ID: job.ID, Type: name, IdempotencyKey: job.Args.IdempotencyKey, Payload: job.Args.Payload,
		Attempt: job.Attempt, MaxAttempts: job.MaxAttempts, ScheduledAt: job.ScheduledAt,
	})
	if herr != nil {
		if errors.Is(herr, ErrPermanent) || job.Attempt >= job.MaxAttempts {
			s.metrics.failed(name)
			s.Logger.Warn("job failed", "job_type", name, "job_id", job.ID, "attempt", job.Attempt, "error", Redact(herr.Error()))
			if errors.Is(herr, ErrPermanent) {
				return river.JobCancel(errors.New(Redact(herr.Error())))
			}
			return errors.New(Redact(herr.Error()))
		}
		s.metrics.count(name, "retry")
		s.Logger.Info("job will retry", "job_type", name, "job_id", job.ID, "attempt", job.Attempt, "error", Redact(herr.Error()))
		return errors.New(Redact(herr.Error()))
	}
	switch out {
	case OutcomeSkip:
		s.metrics.count(name, "skip")
	case OutcomeNoop:
		s.metrics.count(name, "noop")
	default:
		s.metrics.count(name, "done")
	}
	return nil
}

// retryPolicy applies each job type's retry class.
type retryPolicy struct{ s *Scheduler }

func (p retryPolicy) NextRetry(job *rivertype.JobRow) time.Time {
	var a Args
	_ = json.Unmarshal(job.EncodedArgs, &a)
	class := Entity
	if t := p.s.types[a.JobType]; t != nil {
		class = t.Class
	}
	at := p.s.Clock.Now().Add(class.NextDelay(job.Attempt))
	if p.s.alarm != nil {
		p.s.alarm.arm(at, job.ID)
	}
	return at
}

// minLevel drops records below a level: River reports routine progress at
// info level, which would drown the gateway's own logs.
type minLevel struct {
	slog.Handler
	min slog.Level
}

func (m minLevel) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= m.min && m.Handler.Enabled(ctx, l)
}

func (m minLevel) WithAttrs(as []slog.Attr) slog.Handler {
	return minLevel{m.Handler.WithAttrs(as), m.min}
}

func (m minLevel) WithGroup(n string) slog.Handler { return minLevel{m.Handler.WithGroup(n), m.min} }

// JobInfo is one stored job, its state as the seed names it.
type JobInfo struct {
	ID             int64
	Type           string
	IdempotencyKey string
	State          string
	Attempt        int
	MaxAttempts    int
	ScheduledAt    time.Time
}

// Active reports whether the job still counts as live work: Pending,
// Queued (including a retryable failure waiting for its next attempt) or
// Running, whatever its run time.
func (j JobInfo) Active() bool {
	return j.State == StatePending || j.State == StateQueued || j.State == StateRunning
}

// DeadLettered reports whether the job ended without success: Failed at its
// last attempt, or Killed.
func (j JobInfo) DeadLettered() bool { return j.State == StateFailed || j.State == StateKilled }

// Family lists the jobs of jobType whose idempotency key starts with prefix
// (a cycle-key family), newest first. Watchdogs use it to decide whether an
// entity's work is missing.
func (s *Scheduler) Family(ctx context.Context, jobType, prefix string) ([]JobInfo, error) {
	like := strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`).Replace(prefix) + "%"
	res, err := s.client.JobList(ctx, river.NewJobListParams().Kinds(Kind).States(allStates...).First(listLimit).
		OrderBy(river.JobListOrderByID, river.SortOrderDesc).
		Where(`args ->> 'job_type' = @job_type AND args ->> 'idempotency_key' LIKE @key_prefix ESCAPE '\'`,
			river.NamedArgs{"job_type": jobType, "key_prefix": like}))
	if err != nil {
		return nil, fmt.Errorf("list %s jobs: %w", jobType, err)
	}
	out := make([]JobInfo, 0, len(res.Jobs))
	for _, j := range res.Jobs {
		var a Args
		_ = json.Unmarshal(j.EncodedArgs, &a)
		out = append(out, JobInfo{ID: j.ID, Type: a.JobType, IdempotencyKey: a.IdempotencyKey, State: StateOf(j.State),
			Attempt: j.Attempt, MaxAttempts: j.MaxAttempts, ScheduledAt: j.ScheduledAt})
	}
	return out, nil
}

// Cancel kills a job (state Killed) unless it already finished.
func (s *Scheduler) Cancel(ctx context.Context, jobID int64) error {
	// Only the gateway's own jobs: the alarm's doorbell row is not one.
	j, err := s.client.JobGet(ctx, jobID)
	if err != nil {
		return err
	}
	if j.Kind != Kind {
		return river.ErrNotFound
	}
	_, err = s.client.JobCancel(ctx, jobID)
	return err
}

// DeleteJobs deletes the given jobs unless they are Queued or Running:
// only terminal and Pending rows are deletable, checked in the same
// statement, so a job that became due meanwhile is kept.
func (s *Scheduler) DeleteJobs(ctx context.Context, ids []int64) (int64, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	res, err := s.client.JobDeleteMany(ctx, river.NewJobDeleteManyParams().IDs(ids...).Kinds(Kind).First(len(ids)).States(
		rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled,
		rivertype.JobStateScheduled, rivertype.JobStatePending))
	if err != nil {
		return 0, err
	}
	return int64(len(res.Jobs)), nil
}
