package oauth

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/lockedbuf"
)

// connected runs the flow against the fake endpoint and returns the
// connected upstream.
func connected(t *testing.T) (*Service, *tokenServer, *jobs, *store.Upstream) {
	t.Helper()
	s, ts, j, u, _ := setup(t)
	st, err := s.Start(context.Background(), u.ID)
	if err != nil {
		t.Fatal(err)
	}
	ts.challenge = mustQuery(t, st.AuthorizationURL).Get("code_challenge")
	u, _, err = s.Complete(context.Background(), u.ID, st.State, "the-code")
	if err != nil {
		t.Fatal(err)
	}
	return s, ts, j, u
}

func refreshJob(u *store.Upstream, attempt, max int) scheduler.Job {
	p, _ := json.Marshal(refreshPayload{UpstreamID: u.ID, CredentialVersion: u.CredentialVersion})
	return scheduler.Job{Type: RefreshJob, Payload: p, Attempt: attempt, MaxAttempts: max}
}

func down(w http.ResponseWriter, r *http.Request) bool {
	w.WriteHeader(http.StatusServiceUnavailable)
	return true
}

// A refresh that fails transiently records each failure in the upstream's
// status (last_apply_error), says so when the retries are exhausted, and a
// snapshot rebuild writing its apply outcome does not wipe it; the next
// stored token clears it.
func TestRefreshFailureVisibleInStatus(t *testing.T) {
	s, ts, _, u := connected(t)
	ctx := context.Background()
	ts.before = down
	if _, err := s.refresh(ctx, refreshJob(u, 5, 5)); err == nil || errors.Is(err, scheduler.ErrPermanent) {
		t.Fatalf("a 503 must be retryable: %v", err)
	}
	got, _ := s.Store.GetUpstream(ctx, u.ID)
	e := got.Status.Error()
	if e == nil || !strings.Contains(*e, "attempt 5 of 5") || !strings.Contains(*e, "retries exhausted") || got.Status.RefreshRefused {
		t.Fatalf("status after exhausted retries: %+v", got.Status)
	}
	// A rebuild with a clean apply, from a read taken before the failure.
	now := s.Clock.Now()
	if err := s.Store.SetUpstreamStatus(ctx, u.ID, store.UpstreamStatus{LastApplyAt: &now}); err != nil {
		t.Fatal(err)
	}
	if got, _ := s.Store.GetUpstream(ctx, u.ID); got.Status.Error() == nil {
		t.Fatal("a snapshot rebuild wiped the refresh failure")
	}
	ts.before = nil
	if out, err := s.refresh(ctx, refreshJob(u, 1, 5)); err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("refresh after recovery: %q %v", out, err)
	}
	if got, _ := s.Store.GetUpstream(ctx, u.ID); got.Status.Error() != nil {
		t.Fatalf("a new token kept the old failure: %v", *got.Status.Error())
	}
}

// A refusal that lost a race (the credential was rotated meanwhile by
// another refresh) is no failure: nothing recorded, the job is a no-op.
func TestRefusalAfterConcurrentRotationIsMoot(t *testing.T) {
	s, ts, _, u := connected(t)
	ctx := context.Background()
	ts.before = func(w http.ResponseWriter, r *http.Request) bool {
		// Another replica's refresh wins while this one's request is out.
		s.Store.SetUpstreamCredential(ctx, u.ID, "oauth", u.Credential)
		w.WriteHeader(400)
		w.Write([]byte(`{"error":"invalid_grant"}`))
		return true
	}
	if out, err := s.refresh(ctx, refreshJob(u, 1, 5)); err != nil || out != scheduler.OutcomeNoop {
		t.Fatalf("lost race: %q %v", out, err)
	}
	if got, _ := s.Store.GetUpstream(ctx, u.ID); got.Status.Error() != nil || got.Status.RefreshRefused {
		t.Fatalf("lost race recorded as a failure: %+v", got.Status)
	}
}

// The watchdog re-queues a refresh whose jobs all ended without a new
// token under a new attempt key (the old key can never run again), leaves
// an active one alone, restores a lost enqueue under the credential's key,
// and never re-queues a credential whose grant the provider refused.
func TestWatchdogRequeuesUnderNewKey(t *testing.T) {
	s, ts, j, u := connected(t)
	ctx := context.Background()
	base := RefreshKey(u.ID, u.CredentialVersion)
	run := func() []scheduler.Enqueue {
		j.mu.Lock()
		j.got = nil
		j.mu.Unlock()
		if _, err := s.watchdog(ctx, scheduler.Job{}); err != nil {
			t.Fatal(err)
		}
		j.mu.Lock()
		defer j.mu.Unlock()
		return append([]scheduler.Enqueue(nil), j.got...)
	}
	// Lost enqueue: nothing in the table.
	if got := run(); len(got) != 1 || got[0].IdempotencyKey != base {
		t.Fatalf("lost enqueue: %+v", got)
	}
	// Scheduled: nothing to do. A version whose number starts with this
	// one's is another family.
	j.family = []scheduler.JobInfo{{Type: RefreshJob, IdempotencyKey: base, State: scheduler.StatePending},
		{Type: RefreshJob, IdempotencyKey: base + "0", State: scheduler.StateFailed}}
	if got := run(); len(got) != 0 {
		t.Fatalf("active refresh re-queued: %+v", got)
	}
	// Retries exhausted: a new attempt key, due now.
	j.family = []scheduler.JobInfo{{Type: RefreshJob, IdempotencyKey: base, State: scheduler.StateFailed}}
	got := run()
	if len(got) != 1 || got[0].IdempotencyKey != base+":retry1" || !got[0].RunAt.IsZero() {
		t.Fatalf("dead-lettered refresh: %+v", got)
	}
	// That one failed too: the next key.
	j.family = append(j.family, scheduler.JobInfo{Type: RefreshJob, IdempotencyKey: base + ":retry1", State: scheduler.StateFailed})
	if got := run(); len(got) != 1 || got[0].IdempotencyKey != base+":retry2" {
		t.Fatalf("second re-queue: %+v", got)
	}
	// invalid_grant: recorded as refused, never re-queued.
	ts.before = func(w http.ResponseWriter, r *http.Request) bool {
		w.WriteHeader(400)
		w.Write([]byte(`{"error":"invalid_grant","error_description":"revoked"}`))
		return true
	}
	if _, err := s.refresh(ctx, refreshJob(u, 1, 5)); !errors.Is(err, scheduler.ErrPermanent) {
		t.Fatalf("refusal: %v", err)
	}
	if got := run(); len(got) != 0 {
		t.Fatalf("refused credential re-queued: %+v", got)
	}
}

// lazyWorld is a connected service whose token endpoint the test holds
// and whose lazy-refresh timer the test fires.
type lazyWorld struct {
	s        *Service
	ts       *tokenServer
	u        *store.Upstream
	metrics  *scheduler.Metrics
	requests atomic.Int64
	arrived  chan struct{}
	release  chan struct{}
	clock    *fakeclock.Clock
	changed  atomic.Int64
}

func newLazyWorld(t *testing.T) *lazyWorld {
	s, ts, _, u := connected(t)
	w := &lazyWorld{s: s, ts: ts, u: u, arrived: make(chan struct{}, 16), release: make(chan struct{}), clock: s.Clock.(*fakeclock.Clock)}
	w.metrics = scheduler.NewMetrics(prometheus.NewRegistry())
	s.Metrics = w.metrics
	s.Changed = func(context.Context) { w.changed.Add(1) }
	s.LazyRefreshTimeout = 7 * time.Second
	ts.before = func(rw http.ResponseWriter, r *http.Request) bool {
		w.requests.Add(1)
		w.arrived <- struct{}{}
		select {
		case <-w.release:
			return false
		case <-r.Context().Done():
			return true
		}
	}
	return w
}

func (w *lazyWorld) advance(d time.Duration) { w.clock.Advance(d) }

// Concurrent lazy refreshes of one upstream share one provider request;
// the new token is stored (and the snapshot told) before they return; a
// call within the cooldown does not ask the provider again.
func TestRefreshTokenDeduplicates(t *testing.T) {
	w := newLazyWorld(t)
	ctx := context.Background()
	const callers = 8
	errs := make(chan error, callers)
	for i := 0; i < callers; i++ {
		go func() { errs <- w.s.RefreshToken(ctx, w.u.ID) }()
	}
	<-w.arrived
	// Every caller is waiting on the one request (they joined before it
	// was released, or arrive after and meet the cooldown).
	close(w.release)
	for i := 0; i < callers; i++ {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if n := w.requests.Load(); n != 1 {
		t.Fatalf("%d provider requests for %d concurrent callers", n, callers)
	}
	got, _ := w.s.Store.GetUpstream(ctx, w.u.ID)
	if got.CredentialVersion != w.u.CredentialVersion+1 || w.changed.Load() == 0 {
		t.Fatalf("refreshed token not stored/announced: v%d changed=%d", got.CredentialVersion, w.changed.Load())
	}
	if err := w.s.RefreshToken(ctx, w.u.ID); err != nil || w.requests.Load() != 1 {
		t.Fatalf("within the cooldown: %v, %d requests", err, w.requests.Load())
	}
	w.advance(DefaultLazyRefreshCooldown)
	if err := w.s.RefreshToken(ctx, w.u.ID); err != nil || w.requests.Load() != 2 {
		t.Fatalf("after the cooldown: %v, %d requests", err, w.requests.Load())
	}
	if got := testutil.ToFloat64(w.metrics.LazyRefreshTimeout); got != 0 {
		t.Fatalf("timeouts counted: %v", got)
	}
}

// A lazy refresh that outlives its timeout is abandoned (the provider
// request cancelled), counted in svc_scheduler_lazy_refresh_timeout_total
// and recorded in the upstream's status; a caller that gives up early
// does not cancel the shared refresh.
func TestRefreshTokenTimeout(t *testing.T) {
	w := newLazyWorld(t)
	ctx := context.Background()
	impatient, cancel := context.WithCancel(ctx)
	errImpatient := make(chan error, 1)
	go func() { errImpatient <- w.s.RefreshToken(impatient, w.u.ID) }()
	<-w.arrived
	joined := make(chan struct{}, 1)
	w.s.joined = func(string) { joined <- struct{}{} }
	errc := make(chan error, 1)
	go func() { errc <- w.s.RefreshToken(ctx, w.u.ID) }()
	// The patient caller must be waiting on the shared refresh before the
	// timer fires; one arriving after it would start a refresh of its own.
	<-joined
	cancel()
	if err := <-errImpatient; !errors.Is(err, context.Canceled) {
		t.Fatalf("impatient caller: %v", err)
	}
	// The refresh armed its timeout before its request arrived.
	if p := w.clock.Pending(); len(p) != 1 || p[0] != 7*time.Second {
		t.Fatalf("timers armed %v, want the configured 7s", p)
	}
	w.clock.Advance(7 * time.Second)
	if err := <-errc; !errors.Is(err, ErrLazyRefreshTimeout) {
		t.Fatalf("timeout: %v", err)
	}
	if got := testutil.ToFloat64(w.metrics.LazyRefreshTimeout); got != 1 {
		t.Fatalf("svc_scheduler_lazy_refresh_timeout_total = %v", got)
	}
	got, _ := w.s.Store.GetUpstream(ctx, w.u.ID)
	if e := got.Status.Error(); e == nil || !strings.Contains(*e, "timed out") || got.CredentialVersion != w.u.CredentialVersion {
		t.Fatalf("status %+v v%d", got.Status, got.CredentialVersion)
	}
	if n := w.requests.Load(); n != 1 {
		t.Fatalf("%d provider requests", n)
	}
}

// A credential whose grant was refused is not sent to the provider again,
// and this replica's snapshot learns of the refusal before RefreshToken
// returns (routing leaves the upstream out: the relay asked because a
// request met the token refused or expired).
func TestRefreshTokenRefused(t *testing.T) {
	w := newLazyWorld(t)
	ctx := context.Background()
	w.ts.before = func(rw http.ResponseWriter, r *http.Request) bool {
		w.requests.Add(1)
		rw.WriteHeader(400)
		rw.Write([]byte(`{"error":"invalid_grant"}`))
		return true
	}
	if err := w.s.RefreshToken(ctx, w.u.ID); !errors.Is(err, ErrRefreshRefused) {
		t.Fatalf("refusal: %v", err)
	}
	if n := w.changed.Load(); n != 1 {
		t.Fatalf("the snapshot was asked to refresh %d times after the refusal, want 1", n)
	}
	w.advance(time.Hour)
	if err := w.s.RefreshToken(ctx, w.u.ID); !errors.Is(err, ErrRefreshRefused) || w.requests.Load() != 1 {
		t.Fatalf("second call: %v after %d requests", err, w.requests.Load())
	}
	if err := w.s.RefreshToken(ctx, "up_missing"); !errors.Is(err, store.ErrNotFound) {
		t.Fatalf("missing upstream: %v", err)
	}
}

// RequestRefresh is the relay's way to ask: it starts a lazy refresh and
// returns at once, starts none while one runs or within the cooldown after
// one ended, even a failed one (a provider that keeps failing must not get
// a token request per proxied request), and logs a failure it started.
func TestRequestRefreshStartsOneAndCoolsDown(t *testing.T) {
	w := newLazyWorld(t)
	var logs lockedbuf.Buffer
	w.s.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	gates := make(chan chan struct{}, 2)
	w.ts.before = func(rw http.ResponseWriter, r *http.Request) bool {
		w.requests.Add(1)
		w.arrived <- struct{}{}
		<-<-gates
		rw.WriteHeader(http.StatusServiceUnavailable)
		return true
	}
	joined := make(chan struct{}, 1)
	w.s.joined = func(string) { joined <- struct{}{} }
	// end lets the running refresh's provider request answer and returns
	// the refresh's error, read by joining it.
	end := func() error {
		errc := make(chan error, 1)
		go func() { errc <- w.s.RefreshToken(context.Background(), w.u.ID) }()
		<-joined
		gate := make(chan struct{})
		close(gate)
		gates <- gate
		return <-errc
	}
	if !w.s.RequestRefresh(w.u.ID) {
		t.Fatal("the first ask started no refresh")
	}
	<-w.arrived
	if w.s.RequestRefresh(w.u.ID) {
		t.Fatal("a second refresh started while one runs")
	}
	if err := end(); err == nil {
		t.Fatal("the failing token endpoint's refresh succeeded")
	}
	if w.s.RequestRefresh(w.u.ID) || w.requests.Load() != 1 {
		t.Fatalf("a refresh started within the cooldown after a failure (%d provider requests)", w.requests.Load())
	}
	w.advance(DefaultLazyRefreshCooldown)
	if !w.s.RequestRefresh(w.u.ID) {
		t.Fatal("no refresh started after the cooldown")
	}
	<-w.arrived
	if err := end(); err == nil || w.requests.Load() != 2 {
		t.Fatalf("second refresh: %v after %d provider requests", err, w.requests.Load())
	}
	if n := strings.Count(logs.String(), "lazy OAuth token refresh failed"); n != 2 || !strings.Contains(logs.String(), w.u.ID) {
		t.Fatalf("%d failures logged, want the 2 asked for: %s", n, logs.String())
	}
}
