package warmup

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

type fakeJobs struct {
	mu       sync.Mutex
	enqueued []scheduler.Enqueue
	family   []scheduler.JobInfo
}

func (f *fakeJobs) Enqueue(_ context.Context, e scheduler.Enqueue) (bool, int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, x := range f.enqueued {
		if x.Type == e.Type && x.IdempotencyKey == e.IdempotencyKey {
			return false, 0, nil
		}
	}
	f.enqueued = append(f.enqueued, e)
	return true, int64(len(f.enqueued)), nil
}

func (f *fakeJobs) Family(_ context.Context, jobType, prefix string) ([]scheduler.JobInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []scheduler.JobInfo
	for _, j := range f.family {
		if j.Type == jobType && strings.HasPrefix(j.IdempotencyKey, prefix) {
			out = append(out, j)
		}
	}
	return out, nil
}

type fakeTokens struct{}

func (fakeTokens) Token(u *store.Upstream) (*oauth.Token, error) {
	if u.CredentialKind != "oauth" {
		return nil, oauth.ErrNoCredential
	}
	return &oauth.Token{AccessToken: "sk-ant-oat01-secret-access"}, nil
}

// provider answers warm-ups as configured and records them.
type provider struct {
	mu       sync.Mutex
	status   int
	headers  map[string]string
	requests []map[string]any
	auth     []string
}

func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	var body map[string]any
	_ = json.Unmarshal(b, &body)
	p.mu.Lock()
	p.requests = append(p.requests, body)
	p.auth = append(p.auth, r.Header.Get("Authorization")+"|"+r.Header.Get("anthropic-beta"))
	status, headers := p.status, p.headers
	p.mu.Unlock()
	for k, v := range headers {
		w.Header().Set(k, v)
	}
	w.WriteHeader(status)
	io.WriteString(w, `{}`)
}

func (p *provider) count() int { p.mu.Lock(); defer p.mu.Unlock(); return len(p.requests) }

type env struct {
	st   store.Store
	jobs *fakeJobs
	prov *provider
	w    *Warmer
	logs *bytes.Buffer
	clk  *fakeclock.Clock
	up   *store.Upstream
}

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{jobs: &fakeJobs{}, prov: &provider{status: 200}, logs: &bytes.Buffer{}, clk: fakeclock.New(t0)}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "p.db"), sqlite.Options{Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	srv := httptest.NewServer(e.prov)
	t.Cleanup(srv.Close)
	e.w = service.Init(service.Options{Clock: e.clk, Logger: slog.New(slog.NewJSONHandler(e.logs, nil))},
		&Warmer{Store: st, Tokens: fakeTokens{}, Jobs: e.jobs, HTTP: srv.Client()})
	u, err := st.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: srv.URL, Enabled: true, WarmupEnabled: true})
	if err != nil {
		t.Fatal(err)
	}
	e.up = u
	return e
}

func (e *env) connect(t *testing.T) {
	t.Helper()
	u, err := e.st.SetUpstreamCredential(context.Background(), e.up.ID, "oauth", []byte("sealed"))
	if err != nil {
		t.Fatal(err)
	}
	e.up = u
}

func (e *env) run(t *testing.T) (scheduler.Outcome, error) {
	t.Helper()
	p, _ := json.Marshal(payload{UpstreamID: e.up.ID})
	return e.w.attempt(context.Background(), scheduler.Job{ID: 7, Type: JobType, Payload: p, Attempt: 1, MaxAttempts: 5})
}

func (e *env) observe(t *testing.T, obs store.QuotaObservation) {
	t.Helper()
	obs.UpstreamID, obs.CredentialVersion, obs.PolledAt, obs.ObservedAt = e.up.ID, e.up.CredentialVersion, e.clk.Now(), e.clk.Now()
	if _, err := e.st.PutQuota(context.Background(), obs, time.Minute); err != nil {
		t.Fatal(err)
	}
}

// events returns the logged warm-up events (target=warmup) by action.
func (e *env) events(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(e.logs.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m["target"] == "warmup" {
			out = append(out, m)
		}
	}
	return out
}

func (e *env) actions(t *testing.T) string {
	var a []string
	for _, ev := range e.events(t) {
		a = append(a, fmt.Sprint(ev["action"]))
	}
	return strings.Join(a, ",")
}

func ptr[T any](v T) *T { return &v }

// P-WARM-R1: only vendor_oauth upstreams holding OAuth credentials are
// warmed; before OAuth completes the flag has no effect.
func TestNotEligibleBeforeOAuth(t *testing.T) {
	e := setup(t)
	out, err := e.run(t)
	if err != nil || out != scheduler.OutcomeNoop || e.prov.count() != 0 {
		t.Fatalf("outcome %q err %v requests %d", out, err, e.prov.count())
	}
	e.connect(t)
	if _, err := e.st.PatchUpstream(context.Background(), e.up.ID, store.AnyRevision, store.UpstreamPatch{WarmupEnabled: ptr(false)}); err != nil {
		t.Fatal(err)
	}
	if out, _ := e.run(t); out != scheduler.OutcomeNoop || e.prov.count() != 0 {
		t.Fatalf("warm-up off: %q, %d requests", out, e.prov.count())
	}
}

// P-WARM-S1: a fresh observation of an active five-hour window skips the
// attempt without a provider request; the next attempt is due at its end.
func TestWindowAlreadyActive(t *testing.T) {
	e := setup(t)
	e.connect(t)
	reset := e.clk.Now().Add(2 * time.Hour)
	e.observe(t, store.QuotaObservation{FiveHour: store.QuotaWindow{Utilization: 3, ResetsAt: &reset}})
	out, err := e.run(t)
	if err != nil || out != scheduler.OutcomeSkip || e.prov.count() != 0 {
		t.Fatalf("outcome %q err %v requests %d", out, err, e.prov.count())
	}
	if len(e.jobs.enqueued) != 1 || e.jobs.enqueued[0].IdempotencyKey != Key(e.up.ID, reset.Unix()) ||
		!e.jobs.enqueued[0].RunAt.Equal(reset.Add(Jitter(e.up.ID))) {
		t.Fatalf("next attempt %+v", e.jobs.enqueued)
	}
	// A stale observation decides nothing: the provider is asked.
	e.clk.Set(e.clk.Now().Add(time.Hour))
	e.prov.headers = map[string]string{"anthropic-ratelimit-unified-5h-reset": fmt.Sprint(e.clk.Now().Add(5 * time.Hour).Unix())}
	if out, _ := e.run(t); out != scheduler.OutcomeDone || e.prov.count() != 1 {
		t.Fatalf("stale observation: %q, %d requests", out, e.prov.count())
	}
}

// P-WARM-S2, P-WARM-S3, P-LIM-2: an exhausted seven-day window skips the
// attempt, records the reset cycle key, does not stamp the upstream, and
// enqueues the next attempt at the reset plus the stable 30–59 s jitter
// under adaptive:warmup:{upstream_id}:{reset}.
func TestSevenDayExhausted(t *testing.T) {
	for _, via := range []string{"usage cache", "warm-up request"} {
		t.Run(via, func(t *testing.T) {
			e := setup(t)
			e.connect(t)
			reset := e.clk.Now().Add(50 * time.Hour)
			if via == "usage cache" {
				e.observe(t, store.QuotaObservation{SevenDay: store.QuotaWindow{Utilization: 100, ResetsAt: &reset}})
			} else {
				e.prov.status = 429
				e.prov.headers = map[string]string{"anthropic-ratelimit-unified-status": "rejected",
					"anthropic-ratelimit-unified-7d-utilization": "1.0", "anthropic-ratelimit-unified-7d-reset": fmt.Sprint(reset.Unix())}
			}
			out, err := e.run(t)
			if err != nil || out != scheduler.OutcomeSkip {
				t.Fatalf("outcome %q err %v", out, err)
			}
			if via == "usage cache" && e.prov.count() != 0 {
				t.Fatal("a provider request was sent despite the fresh usage cache")
			}
			ws, _ := e.st.GetWarmupState(context.Background(), e.up.ID)
			u, _ := e.st.GetUpstream(context.Background(), e.up.ID)
			if ws.ResetCycleKey != fmt.Sprintf("7d:%d", reset.Unix()) || ws.CycleKey != "" || u.Status.LastWarmupAt != nil {
				t.Fatalf("state %+v, stamped %v", ws, u.Status.LastWarmupAt)
			}
			want := fmt.Sprintf("adaptive:warmup:%s:%d", e.up.ID, reset.Unix())
			if len(e.jobs.enqueued) != 1 || e.jobs.enqueued[0].IdempotencyKey != want {
				t.Fatalf("enqueued %+v, want key %s", e.jobs.enqueued, want)
			}
			if d := e.jobs.enqueued[0].RunAt.Sub(reset); d < 30*time.Second || d > 59*time.Second || d != Jitter(e.up.ID) {
				t.Fatalf("next attempt %s after the reset", d)
			}
		})
	}
}

// P-WARM-1, P-WARM-S4, P-EV-1: a dispatched cycle sends a one-token request
// to a small model with the OAuth token, writes the cycle key, stamps the
// upstream and logs dispatch_start, dispatch_result and cycle_key_written.
func TestCycleComplete(t *testing.T) {
	e := setup(t)
	e.connect(t)
	reset := e.clk.Now().Add(5 * time.Hour).Truncate(time.Second)
	e.prov.headers = map[string]string{"anthropic-ratelimit-unified-status": "allowed", "anthropic-ratelimit-unified-5h-reset": fmt.Sprint(reset.Unix()),
		"anthropic-ratelimit-unified-5h-utilization": "0.01"}
	out, err := e.run(t)
	if err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("outcome %q err %v", out, err)
	}
	req := e.prov.requests[0]
	if req["max_tokens"] != 1.0 || req["model"] != DefaultModel {
		t.Fatalf("warm-up request %v", req)
	}
	if e.prov.auth[0] != "Bearer sk-ant-oat01-secret-access|"+credential.OAuthBeta {
		t.Fatalf("credentials sent: %q", e.prov.auth[0])
	}
	ws, _ := e.st.GetWarmupState(context.Background(), e.up.ID)
	u, _ := e.st.GetUpstream(context.Background(), e.up.ID)
	if ws.CycleKey != fmt.Sprintf("5h:%d", reset.Unix()) || u.Status.LastWarmupAt == nil || !u.Status.LastWarmupAt.Equal(e.clk.Now()) {
		t.Fatalf("cycle %+v stamp %v", ws, u.Status.LastWarmupAt)
	}
	if got := e.actions(t); got != "dispatch_start,dispatch_result,cycle_key_written" {
		t.Fatalf("events %s", got)
	}
	ev := e.events(t)
	if ev[1]["upstream_id"] != e.up.ID || ev[1]["status"] != 200.0 || ev[1]["outcome"] != OutcomeWarmed || ev[2]["cycle_key"] != ws.CycleKey {
		t.Fatalf("event fields %v", ev)
	}
	if strings.Contains(e.logs.String(), "secret-access") {
		t.Fatal("the access token was logged")
	}
	if len(e.jobs.enqueued) != 1 || e.jobs.enqueued[0].IdempotencyKey != Key(e.up.ID, reset.Unix()) {
		t.Fatalf("next %+v", e.jobs.enqueued)
	}
	// A redelivery of the same cycle (at least once) writes nothing new.
	e.logs.Reset()
	if _, err := e.run(t); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(e.actions(t), "cycle_key_written") {
		t.Fatal("the same cycle key was written twice")
	}
}

// P-WARM-S5: missing observations or a permanent failure abandon the cycle.
func TestCycleAbandoned(t *testing.T) {
	e := setup(t)
	e.connect(t)
	if out, err := e.run(t); err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("outcome %q err %v", out, err)
	}
	ev := e.events(t)
	last := ev[len(ev)-1]
	if last["action"] != "cycle_abandoned" || last["reason"] != ReasonMissingObservations {
		t.Fatalf("events %v", ev)
	}
	if u, _ := e.st.GetUpstream(context.Background(), e.up.ID); u.Status.LastWarmupAt != nil {
		t.Fatal("an abandoned cycle stamped the upstream")
	}
	e.logs.Reset()
	e.prov.status = 401
	_, err := e.run(t)
	if !errors.Is(err, scheduler.ErrPermanent) {
		t.Fatalf("401: %v", err)
	}
	ev = e.events(t)
	last = ev[len(ev)-1]
	if last["action"] != "cycle_abandoned" || last["reason"] != ReasonPermanentFailure || ev[len(ev)-2]["outcome"] != OutcomePermanent {
		t.Fatalf("events %v", ev)
	}
	// 5xx is retried by the class; the last attempt abandons the cycle.
	e.logs.Reset()
	e.prov.status = 529
	p, _ := json.Marshal(payload{UpstreamID: e.up.ID})
	if _, err := e.w.attempt(context.Background(), scheduler.Job{ID: 8, Payload: p, Attempt: 2, MaxAttempts: 5}); err == nil || errors.Is(err, scheduler.ErrPermanent) {
		t.Fatalf("529 on attempt 2: %v", err)
	}
	if strings.Contains(e.actions(t), "cycle_abandoned") {
		t.Fatal("abandoned before the last attempt")
	}
	if _, err := e.w.attempt(context.Background(), scheduler.Job{ID: 8, Payload: p, Attempt: 5, MaxAttempts: 5}); err == nil {
		t.Fatal("529 on the last attempt succeeded")
	}
	if !strings.Contains(e.actions(t), "cycle_abandoned") {
		t.Fatal("the last failed attempt did not abandon the cycle")
	}
}

// P-WARM-2: one warm-up per upstream at a time.
func TestLeaseExcludesConcurrentAttempts(t *testing.T) {
	e := setup(t)
	e.connect(t)
	ok, err := e.st.AcquireWarmupLease(context.Background(), e.up.ID, "job:99", e.clk.Now().Add(time.Minute), e.clk.Now())
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if out, _ := e.run(t); out != scheduler.OutcomeSkip || e.prov.count() != 0 {
		t.Fatalf("ran beside another attempt: %q, %d requests", out, e.prov.count())
	}
}

// P-WARM-W1, P-WARM-W2: the watchdog counts any pending, queued, running or
// retryable task of the family as active, even when due in the future, and
// enqueues a new immediate attempt when only dead-lettered tasks remain.
func TestWatchdog(t *testing.T) {
	e := setup(t)
	prefix := FamilyPrefix(e.up.ID)
	// Not connected: nothing to watch.
	if out, _ := e.w.watchdog(context.Background(), scheduler.Job{}); out != scheduler.OutcomeNoop || len(e.jobs.enqueued) != 0 {
		t.Fatal("watched an upstream without credentials")
	}
	e.connect(t)
	for _, st := range []string{scheduler.StatePending, scheduler.StateQueued, scheduler.StateRunning} {
		e.jobs.family = []scheduler.JobInfo{{Type: JobType, IdempotencyKey: prefix + "999999", State: st, ScheduledAt: e.clk.Now().Add(100 * time.Hour)},
			{Type: JobType, IdempotencyKey: prefix + "1", State: scheduler.StateFailed}}
		if out, _ := e.w.watchdog(context.Background(), scheduler.Job{}); out != scheduler.OutcomeNoop || len(e.jobs.enqueued) != 0 {
			t.Fatalf("%s future task did not count as active: %+v", st, e.jobs.enqueued)
		}
	}
	for _, dead := range []string{scheduler.StateFailed, scheduler.StateKilled} {
		e.jobs.enqueued = nil
		e.jobs.family = []scheduler.JobInfo{{Type: JobType, IdempotencyKey: prefix + "1", State: dead}}
		if out, _ := e.w.watchdog(context.Background(), scheduler.Job{}); out != scheduler.OutcomeDone || len(e.jobs.enqueued) != 1 {
			t.Fatalf("%s only: %+v", dead, e.jobs.enqueued)
		}
		if got := e.jobs.enqueued[0]; got.IdempotencyKey != Key(e.up.ID, e.clk.Now().Unix()) || !got.RunAt.Equal(e.clk.Now()) {
			t.Fatalf("new work %+v", got)
		}
	}
}

// The jitter is stable per upstream and always 30 to 59 seconds.
func TestJitter(t *testing.T) {
	seen := map[time.Duration]bool{}
	for i := range 2000 {
		id := fmt.Sprintf("up_%d", i)
		j := Jitter(id)
		if j < 30*time.Second || j > 59*time.Second || j != Jitter(id) || j%time.Second != 0 {
			t.Fatalf("jitter(%s) = %s", id, j)
		}
		seen[j] = true
	}
	if len(seen) != 30 {
		t.Fatalf("only %d distinct jitters", len(seen))
	}
}

// A warm-up dialect may shape the request's headers, but the credential is
// the warm-up's own: its bearer token and the OAuth beta alone, whatever
// Authorization or anthropic-beta the dialect set.
func TestDialectCannotChangeTheCredential(t *testing.T) {
	e := setup(t)
	ctx := context.Background()
	v := "1.0.0"
	entry, err := e.st.CreateRegistryEntry(ctx, store.RegistryEntry{Name: "dialect", Version: &v, Digest: "d-dialect", Slots: []string{store.SlotWarmupDialect}}, []byte("\x00asm"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.st.PatchUpstream(ctx, e.up.ID, store.AnyRevision, store.UpstreamPatch{SetWarmupDialect: true, WarmupDialectPlugin: &entry.ID}); err != nil {
		t.Fatal(err)
	}
	e.connect(t)
	e.w.Shape = func(_ context.Context, _ string, _ *store.Upstream, body []byte, h http.Header) ([]byte, error) {
		h.Set("Anthropic-Beta", "dialect-beta")
		h.Set("Authorization", "Bearer dialect")
		return body, nil
	}
	if out, err := e.run(t); err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("outcome %q err %v", out, err)
	}
	if e.prov.auth[0] != "Bearer sk-ant-oat01-secret-access|"+credential.OAuthBeta {
		t.Fatalf("credentials sent: %q", e.prov.auth[0])
	}
}

// The warm-up sends its bearer to the upstream's base_url only: an upstream
// that redirects it to another origin gets nothing sent there (the
// provider, standing for that origin here, records no request).
func TestWarmupFollowsNoRedirectElsewhere(t *testing.T) {
	e := setup(t)
	elsewhere := httptest.NewServer(e.prov)
	defer elsewhere.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, elsewhere.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer home.Close()
	if _, err := e.st.PatchUpstream(context.Background(), e.up.ID, store.AnyRevision, store.UpstreamPatch{BaseURL: &home.URL}); err != nil {
		t.Fatal(err)
	}
	e.connect(t)
	e.run(t)
	if n := e.prov.count(); n != 0 {
		t.Fatalf("%d warm-up request(s) followed the redirect to another origin: %q", n, e.prov.auth)
	}
}
