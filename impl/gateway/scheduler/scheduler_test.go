package scheduler

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/rivertype"
	_ "modernc.org/sqlite"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/pgtest"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

// fast is a retry class for tests: the seed's shape with millisecond delays.
var fast = RetryClass{Name: "fast", MaxAttempts: 3, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}

func openSQLite(t testing.TB, path string) *sql.DB {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+path+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	return db
}

type bundle struct {
	s       *Scheduler
	metrics *Metrics
	reg     *prometheus.Registry
	flaky   atomic.Int64
}

// driver opens schedulers on one database kind; shared names one database
// (a file or a schema URL) several schedulers use, like replicas.
type driver struct {
	name   string
	shared func(t testing.TB) string
	open   func(t testing.TB, shared string, types []Type, o Options) (*Scheduler, error)
}

var sqliteDriver = driver{
	name:   "sqlite",
	shared: func(t testing.TB) string { return filepath.Join(t.TempDir(), "s.db") },
	open: func(t testing.TB, path string, types []Type, o Options) (*Scheduler, error) {
		return NewSQLite(context.Background(), openSQLite(t, path), types, o)
	},
}

var postgresDriver = driver{
	name:   "postgres",
	shared: func(t testing.TB) string { return pgtest.Schema(t) },
	open: func(t testing.TB, dsn string, types []Type, o Options) (*Scheduler, error) {
		pool, err := pgxpool.New(context.Background(), dsn)
		if err != nil {
			return nil, err
		}
		t.Cleanup(pool.Close)
		return NewPostgres(context.Background(), pool, types, o)
	},
}

// eachDriver runs one test body against every driver.
func eachDriver(t *testing.T, body func(t *testing.T, d driver)) {
	for _, d := range []driver{sqliteDriver, postgresDriver} {
		t.Run(d.name, func(t *testing.T) {
			t.Parallel()
			body(t, d)
		})
	}
}

func setup(t *testing.T, d driver, shared string, clk clock.Clock, extra ...Type) *bundle {
	t.Helper()
	b := &bundle{reg: prometheus.NewRegistry()}
	b.metrics = NewMetrics(b.reg)
	types := []Type{
		{Name: "test:ok", Class: fast, Handler: func(context.Context, Job) (Outcome, error) { return OutcomeDone, nil }},
		{Name: "test:skip", Class: fast, Handler: func(context.Context, Job) (Outcome, error) { return OutcomeSkip, nil }},
		{Name: "test:flaky", Class: fast, Handler: func(_ context.Context, j Job) (Outcome, error) {
			if b.flaky.Add(1) < 3 {
				return "", errors.New("transient")
			}
			return OutcomeDone, nil
		}},
		{Name: "test:fail", Class: fast, Handler: func(context.Context, Job) (Outcome, error) {
			return "", errors.New("upstream said 401 to Authorization: Bearer sk-ant-oat01-TOPSECRETTOKEN")
		}},
		{Name: "test:permanent", Class: fast, Handler: func(context.Context, Job) (Outcome, error) {
			return "", fmt.Errorf("bad credential: %w", ErrPermanent)
		}},
		{Name: "test:panic", Class: RetryClass{Name: "once", MaxAttempts: 1, Base: time.Millisecond, Max: time.Millisecond},
			Handler: func(context.Context, Job) (Outcome, error) { panic("boom") }},
	}
	types = append(types, extra...)
	s, err := d.open(t, shared, types, Options{Metrics: b.metrics, Clock: clk, PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	b.s = s
	return b
}

func (b *bundle) start(t *testing.T) {
	t.Helper()
	if err := b.s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		b.s.Stop(ctx)
	})
}

// waitState polls the job until it reaches a terminal River state.
func waitState(t *testing.T, s *Scheduler, id int64) *rivertype.JobRow {
	t.Helper()
	var job *rivertype.JobRow
	waitfor.Until(t, fmt.Sprintf("job %d to finish", id), func() error {
		res, err := s.client.JobList(context.Background(), river.NewJobListParams().IDs(id).States(allStates...))
		if err != nil {
			return err
		}
		if len(res.Jobs) != 1 {
			return fmt.Errorf("%d jobs listed", len(res.Jobs))
		}
		switch job = res.Jobs[0]; job.State {
		case rivertype.JobStateCompleted, rivertype.JobStateDiscarded, rivertype.JobStateCancelled:
			return nil
		}
		return fmt.Errorf("state %s", job.State)
	})
	return job
}

func enqueue(t *testing.T, s *Scheduler, typ, key string) (bool, int64) {
	t.Helper()
	ins, id, err := s.Enqueue(context.Background(), Enqueue{Type: typ, IdempotencyKey: key})
	if err != nil {
		t.Fatal(err)
	}
	return ins, id
}

// P-JOB-1, P-JOB-5, P-WARM-S6: one row per (job_type, idempotency_key), even
// after the job completed; a new key makes new work and the old row stays.
func TestUniquePerTypeAndKey(t *testing.T) { eachDriver(t, testUniquePerTypeAndKey) }

func testUniquePerTypeAndKey(t *testing.T, d driver) {
	b := setup(t, d, d.shared(t), nil)
	b.start(t)
	ins, id := enqueue(t, b.s, "test:ok", "k1")
	ins2, id2 := enqueue(t, b.s, "test:ok", "k1")
	if !ins || ins2 || id != id2 {
		t.Fatalf("duplicate inserted: %v %v %d %d", ins, ins2, id, id2)
	}
	if ins, _ := enqueue(t, b.s, "test:skip", "k1"); !ins {
		t.Fatal("same key under another job type refused")
	}
	if waitState(t, b.s, id).State != rivertype.JobStateCompleted {
		t.Fatal("not completed")
	}
	if ins, _ := enqueue(t, b.s, "test:ok", "k1"); ins {
		t.Fatal("a completed key was enqueued again")
	}
	ins3, id3 := enqueue(t, b.s, "test:ok", "k2")
	if !ins3 || waitState(t, b.s, id3).State != rivertype.JobStateCompleted {
		t.Fatal("new key did not run")
	}
	if _, _, err := b.s.Enqueue(context.Background(), Enqueue{Type: "nope", IdempotencyKey: "x"}); err == nil {
		t.Fatal("unknown type accepted")
	}
}

// P-JOB-4, P-JOB-3, P-MET-1, P-MET-3, P-API-4, P-API-6: retries within the
// class, Failed when exhausted, visible (redacted) in the failure listing.
func TestRetriesFailuresAndMetrics(t *testing.T) { eachDriver(t, testRetriesFailuresAndMetrics) }

func testRetriesFailuresAndMetrics(t *testing.T, d driver) {
	b := setup(t, d, d.shared(t), nil)
	b.start(t)
	_, flaky := enqueue(t, b.s, "test:flaky", "f")
	_, fail := enqueue(t, b.s, "test:fail", "x")
	_, perm := enqueue(t, b.s, "test:permanent", "p")
	_, pan := enqueue(t, b.s, "test:panic", "q")
	_, skip := enqueue(t, b.s, "test:skip", "s")

	if j := waitState(t, b.s, flaky); j.State != rivertype.JobStateCompleted || j.Attempt != 3 {
		t.Fatalf("flaky: %s after %d attempts", j.State, j.Attempt)
	}
	if j := waitState(t, b.s, fail); j.State != rivertype.JobStateDiscarded || j.Attempt != fast.MaxAttempts {
		t.Fatalf("fail: %s after %d attempts", j.State, j.Attempt)
	}
	if j := waitState(t, b.s, perm); j.State != rivertype.JobStateCancelled || j.Attempt != 1 {
		t.Fatalf("permanent: %s after %d attempts", j.State, j.Attempt)
	}
	waitState(t, b.s, pan)
	waitState(t, b.s, skip)

	m := b.metrics
	for _, c := range []struct {
		typ, status string
		want        float64
	}{
		{"test:flaky", "started", 3}, {"test:flaky", "retry", 2}, {"test:flaky", "done", 1},
		{"test:fail", "retry", 2}, {"test:skip", "skip", 1}, {"test:panic", "panicked", 1},
		{"test:ok", "done", 0}, // pre-registered, never run
	} {
		if got := testutil.ToFloat64(m.Jobs.WithLabelValues(c.typ, c.status)); got != c.want {
			t.Errorf("jobs_total{%s,%s} = %v, want %v", c.typ, c.status, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.Failures.WithLabelValues("test:fail")); got != 1 {
		t.Errorf("failures_total{test:fail} = %v", got)
	}
	// Cardinality: registered job types × 6 statuses exist from the start.
	if n := testutil.CollectAndCount(m.Jobs); n != 6*6 {
		t.Errorf("jobs_total series = %d, want %d", n, 36)
	}

	srv := httptest.NewServer(b.s.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/admin/scheduler/failures")
	if !strings.Contains(body, `"job_type":"test:fail"`) || !strings.Contains(body, `"state":"Failed"`) ||
		!strings.Contains(body, `"state":"Killed"`) || !strings.Contains(body, `"attempt":3`) {
		t.Fatalf("failures: %s", body)
	}
	if strings.Contains(body, "TOPSECRETTOKEN") {
		t.Fatalf("secret in failures: %s", body)
	}
	filtered := get(t, srv.URL+"/admin/scheduler/failures?job_type=test:permanent")
	if strings.Contains(filtered, "test:fail") || !strings.Contains(filtered, "test:permanent") {
		t.Fatalf("filter: %s", filtered)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	return string(b)
}

// P-TOPO-1, P-TOPO-2: every replica pushes each tick; exactly one job per
// tick results, and the duplicate push is not an error.
func TestCronOneJobPerTickAcrossReplicas(t *testing.T) { eachDriver(t, testCronOneJobPerTick) }

func testCronOneJobPerTick(t *testing.T, d driver) {
	path := d.shared(t)
	clk := fakeclock.New(time.Date(2026, 1, 1, 10, 0, 30, 0, time.UTC))
	var runs atomic.Int64
	hourly := Type{Name: "test:hourly", Class: Maintenance, Every: time.Hour, Handler: func(context.Context, Job) (Outcome, error) {
		runs.Add(1)
		return OutcomeDone, nil
	}}
	a := setup(t, d, path, clk, hourly)
	b := setup(t, d, path, clk, hourly)
	for i := 0; i < 3; i++ {
		a.s.PushDueTicks(context.Background())
		b.s.PushDueTicks(context.Background())
	}
	clk.Set(clk.Now().Add(time.Hour))
	a.s.PushDueTicks(context.Background())
	b.s.PushDueTicks(context.Background())

	res, err := a.s.client.JobList(context.Background(), river.NewJobListParams().Kinds(Kind).States(allStates...).First(100))
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]int{}
	for _, j := range res.Jobs {
		keys[string(j.EncodedArgs)]++
	}
	// 10:00, 11:00 and 12:00 pushed at 10:00:30 (two ticks ahead), 13:00 at 11:00:30.
	if len(res.Jobs) != 4 || len(keys) != 4 {
		t.Fatalf("want one job per tick (4), got %d: %v", len(res.Jobs), keys)
	}
	// P-API-5: status lists the recurring job with its next run, read from
	// the job table: no worker ran the 10:00 tick, so it is still the next
	// run, an hour and a half overdue.
	srv := httptest.NewServer(a.s.Handler())
	defer srv.Close()
	body := get(t, srv.URL+"/admin/scheduler/status")
	want := fmt.Sprintf(`"next_run_at_unix_secs":%d,"overdue_secs":3630`, time.Date(2026, 1, 1, 10, 0, 0, 0, time.UTC).Unix())
	if !strings.Contains(body, `"job_type":"test:hourly"`) || !strings.Contains(body, want) {
		t.Fatalf("status: %s (want %s)", body, want)
	}
}

// next_run_at is what is really queued: a stalled cron (due, not run)
// shows as a next run in the past that does not advance; once a worker
// runs the tick, the tick pushed ahead is the next run.
func TestNextRunAtFromTheJobTable(t *testing.T) { eachDriver(t, testNextRunAt) }

func testNextRunAt(t *testing.T, d driver) {
	tick := time.Now().Truncate(time.Hour) // due in River's (real) time
	clk := fakeclock.New(tick.Add(30 * time.Minute))
	hourly := Type{Name: "test:hourly", Class: Maintenance, Every: time.Hour, Handler: func(context.Context, Job) (Outcome, error) {
		return OutcomeDone, nil
	}}
	b := setup(t, d, d.shared(t), clk, hourly)
	ctx := context.Background()
	b.s.PushDueTicks(ctx)
	status := func() RecurringJob {
		srv := httptest.NewServer(b.s.Handler())
		defer srv.Close()
		var st Status
		if err := json.Unmarshal([]byte(get(t, srv.URL+"/admin/scheduler/status")), &st); err != nil {
			t.Fatal(err)
		}
		for _, rj := range st.RecurringJobs {
			if rj.JobType == "test:hourly" {
				return rj
			}
		}
		t.Fatalf("no recurring job in %+v", st)
		return RecurringJob{}
	}
	rj := status()
	if rj.NextRunAt == nil || !rj.NextRunAt.Equal(tick) || rj.OverdueSecs != 1800 {
		t.Fatalf("stalled cron: next %v overdue %d, want %v and 1800", rj.NextRunAt, rj.OverdueSecs, tick)
	}
	fam, err := b.s.Family(ctx, "test:hourly", TickKey("test:hourly", tick))
	if err != nil || len(fam) != 1 {
		t.Fatalf("tick job: %+v %v", fam, err)
	}
	b.start(t)
	waitState(t, b.s, fam[0].ID)
	rj = status()
	if rj.NextRunAt == nil || !rj.NextRunAt.Equal(tick.Add(time.Hour)) || rj.OverdueSecs != 0 {
		t.Fatalf("after the run: next %v overdue %d", rj.NextRunAt, rj.OverdueSecs)
	}
}

// The failure listing is the newest tickets first, filtered by job type in
// the query: old tickets of another type (more than the listing's limit)
// never hide the newer ones asked for.
func TestFailuresNewestFirstFilteredInQuery(t *testing.T) { eachDriver(t, testFailuresNewest) }

func testFailuresNewest(t *testing.T, d driver) {
	b := setup(t, d, d.shared(t), nil)
	b.start(t) // River's cancel notifies the running producer
	ctx := context.Background()
	later := time.Now().Add(time.Hour) // scheduled, so cancelling finalizes at once
	kill := func(typ string, i int) {
		_, id, err := b.s.Enqueue(ctx, Enqueue{Type: typ, IdempotencyKey: fmt.Sprintf("%s-%d", typ, i), RunAt: later})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.s.Cancel(ctx, id); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < listLimit+5; i++ {
		kill("test:ok", i)
	}
	for i := 0; i < 3; i++ {
		kill("test:skip", i)
	}
	srv := httptest.NewServer(b.s.Handler())
	defer srv.Close()
	var all, skip struct{ Failures []Failure }
	json.Unmarshal([]byte(get(t, srv.URL+"/admin/scheduler/failures")), &all)
	json.Unmarshal([]byte(get(t, srv.URL+"/admin/scheduler/failures?job_type=test:skip")), &skip)
	if len(all.Failures) != listLimit || all.Failures[0].IdempotencyKey != "test:skip-2" || all.Failures[0].State != StateKilled {
		t.Fatalf("unfiltered: %d tickets, first %+v", len(all.Failures), all.Failures[0])
	}
	for i := 1; i < len(all.Failures); i++ {
		if all.Failures[i].FailedAt.After(all.Failures[i-1].FailedAt) {
			t.Fatalf("not newest first at %d", i)
		}
	}
	if len(skip.Failures) != 3 || skip.Failures[0].IdempotencyKey != "test:skip-2" || skip.Failures[2].IdempotencyKey != "test:skip-0" {
		t.Fatalf("filtered: %+v", skip.Failures)
	}
}

// A scheduler that cannot start (here: River's migration meets a table of
// its name that is not River's) leaves a Down scheduler: the init-failure
// gauge at 1, enqueues refused, the admin endpoints 503 with the cause.
func TestDownScheduler(t *testing.T) { eachDriver(t, testDown) }

func testDown(t *testing.T, d driver) {
	shared := d.shared(t)
	var exec func(q string) error
	if d.name == "sqlite" {
		db := openSQLite(t, shared)
		exec = func(q string) error { _, err := db.Exec(q); return err }
	} else {
		exec = func(q string) error {
			c, err := pgx.Connect(context.Background(), shared)
			if err != nil {
				return err
			}
			defer c.Close(context.Background())
			_, err = c.Exec(context.Background(), q)
			return err
		}
	}
	if err := exec("CREATE TABLE river_job (id INTEGER PRIMARY KEY, note TEXT)"); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics(prometheus.NewRegistry())
	types := []Type{{Name: "test:ok", Class: fast, Handler: func(context.Context, Job) (Outcome, error) { return OutcomeDone, nil }}}
	_, err := d.open(t, shared, types, Options{Metrics: m})
	if err == nil {
		t.Fatal("River migrated over a foreign river_job table")
	}
	s := Down(types, Options{Metrics: m}, err)
	if got := testutil.ToFloat64(m.InitFailure); got != 1 {
		t.Fatalf("svc_scheduler_init_failure = %v", got)
	}
	if _, _, err := s.Enqueue(context.Background(), Enqueue{Type: "test:ok", IdempotencyKey: "k"}); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("enqueue on a down scheduler: %v", err)
	}
	if _, err := s.Family(context.Background(), "test:ok", ""); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("family on a down scheduler: %v", err)
	}
	srv := httptest.NewServer(s.Handler())
	defer srv.Close()
	for _, path := range []string{"/admin/scheduler/status", "/admin/scheduler/failures", "/admin/scheduler/jobs?job_type=test:ok"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 503 || !strings.Contains(string(body), `"code":"scheduler_unavailable"`) || !strings.Contains(string(body), "river") {
			t.Fatalf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}

// P-WARM-W1, P-WARM-W2: a family lists future, running, retryable and
// dead-lettered jobs with the states a watchdog decides on.
func TestFamily(t *testing.T) { eachDriver(t, testFamily) }

func testFamily(t *testing.T, d driver) {
	b := setup(t, d, d.shared(t), nil)
	ctx := context.Background()
	future := time.Now().Add(time.Hour)
	if _, _, err := b.s.Enqueue(ctx, Enqueue{Type: "test:ok", IdempotencyKey: "fam:u_1:100", RunAt: future}); err != nil {
		t.Fatal(err)
	}
	enqueue(t, b.s, "test:fail", "fam:u_1:200")
	enqueue(t, b.s, "test:ok", "fam:u_10:1") // another family sharing the prefix text "fam:u_1"
	enqueue(t, b.s, "test:ok", "fam:uX1:1")  // '_' must not match as a wildcard
	fam, err := b.s.Family(ctx, "test:ok", "fam:u_1:")
	if err != nil {
		t.Fatal(err)
	}
	if len(fam) != 1 || fam[0].IdempotencyKey != "fam:u_1:100" || fam[0].State != StatePending || !fam[0].Active() || fam[0].DeadLettered() {
		t.Fatalf("family = %+v", fam)
	}
	b.start(t)
	_, id := enqueue(t, b.s, "test:fail", "fam:u_1:200")
	waitState(t, b.s, id)
	fam, err = b.s.Family(ctx, "test:fail", "fam:u_1:")
	if err != nil {
		t.Fatal(err)
	}
	if len(fam) != 1 || fam[0].State != StateFailed || !fam[0].DeadLettered() || fam[0].Active() {
		t.Fatalf("dead-lettered family = %+v", fam)
	}
}

// P-KA-3: cleanup may delete terminal and Pending rows, never Queued or
// Running ones.
func TestDeleteJobs(t *testing.T) { eachDriver(t, testDeleteJobs) }

func testDeleteJobs(t *testing.T, d driver) {
	release := make(chan struct{})
	running := make(chan struct{}, 1)
	block := Type{Name: "test:block", Class: fast, Handler: func(ctx context.Context, j Job) (Outcome, error) {
		running <- struct{}{}
		<-release
		return OutcomeDone, nil
	}}
	b := setup(t, d, d.shared(t), nil, block)
	ctx := context.Background()
	_, pending, _ := b.s.Enqueue(ctx, Enqueue{Type: "test:ok", IdempotencyKey: "pending", RunAt: time.Now().Add(time.Hour)})
	_, queued, _ := b.s.Enqueue(ctx, Enqueue{Type: "test:ok", IdempotencyKey: "queued"}) // available; no worker yet
	if n, err := b.s.DeleteJobs(ctx, []int64{queued}); err != nil || n != 0 {
		t.Fatalf("a Queued job was deleted (%d, %v)", n, err)
	}
	b.start(t)
	t.Cleanup(func() { close(release) })
	_, run, _ := b.s.Enqueue(ctx, Enqueue{Type: "test:block", IdempotencyKey: "running"})
	<-running
	waitState(t, b.s, queued)
	_, done, _ := b.s.Enqueue(ctx, Enqueue{Type: "test:ok", IdempotencyKey: "done"})
	waitState(t, b.s, done)
	n, err := b.s.DeleteJobs(ctx, []int64{pending, run, done})
	if err != nil {
		t.Fatal(err)
	}
	if n != 2 {
		t.Fatalf("deleted %d jobs, want the pending and the done one", n)
	}
	fam, _ := b.s.Family(ctx, "test:block", "running")
	if len(fam) != 1 || fam[0].State != StateRunning {
		t.Fatalf("running job: %+v", fam)
	}
	if fam, _ := b.s.Family(ctx, "test:ok", "pending"); len(fam) != 0 {
		t.Fatalf("pending job kept: %+v", fam)
	}
}
