package alerts_test

import (
	"context"
	"encoding/json"
	"errors"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/alerts"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlstore"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// opener "decrypts" a value that starts with its associated data.
type opener struct{}

func (opener) Open(ct, ad []byte) ([]byte, error) {
	if len(ct) < len(ad) || string(ct[:len(ad)]) != string(ad) {
		return nil, errors.New("bad binding")
	}
	return ct[len(ad):], nil
}

// world is what the evaluator observes, changed by each test step.
type world struct {
	mu       sync.Mutex
	snap     *snapshot.Snapshot
	stored   int64
	quotas   map[string]*store.QuotaObservation
	budgets  map[string]float64
	enqueued []scheduler.Enqueue
}

func (w *world) Current() *snapshot.Snapshot { w.mu.Lock(); defer w.mu.Unlock(); return w.snap }

func (w *world) BudgetUsed(p string, _ []limits.Limit) (float64, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	r, ok := w.budgets[p]
	return r, ok
}

func (w *world) Enqueue(_ context.Context, e scheduler.Enqueue) (bool, int64, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.enqueued = append(w.enqueued, e)
	return true, int64(len(w.enqueued)), nil
}

// take returns the deliveries enqueued since the last call as
// "<webhook>:<alert key>:<status>", sorted, with their events.
func (w *world) take(t *testing.T) ([]string, []alerts.Event) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var keys []string
	var evs []alerts.Event
	for _, e := range w.enqueued {
		var p webhook.Payload
		var ev alerts.Event
		if err := json.Unmarshal(e.Payload, &p); err != nil || json.Unmarshal(p.Event, &ev) != nil || e.Type != webhook.JobType {
			t.Fatalf("payload %s", e.Payload)
		}
		if !strings.HasPrefix(e.IdempotencyKey, p.WebhookID+":") {
			t.Fatalf("key %q does not name webhook %s", e.IdempotencyKey, p.WebhookID)
		}
		keys = append(keys, p.WebhookID+":"+keyOf(ev)+":"+ev.Status)
		evs = append(evs, ev)
	}
	w.enqueued = nil
	sort.Strings(keys)
	return keys, evs
}

func keyOf(ev alerts.Event) string {
	k := ev.Alert + ":" + ev.Subject.ID
	if ev.Subject.Window != "" {
		k += ":" + ev.Subject.Window
	}
	return k
}

// worldStore is the real SQLite store with the stored generation and the
// polled usage set by the test.
type worldStore struct {
	*sqlstore.Store
	w *world
}

func (s worldStore) ConfigGeneration(context.Context) (int64, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	return s.w.stored, nil
}

func (s worldStore) GetQuota(_ context.Context, id string) (*store.QuotaObservation, error) {
	s.w.mu.Lock()
	defer s.w.mu.Unlock()
	if q, ok := s.w.quotas[id]; ok {
		c := *q
		return &c, nil
	}
	return nil, store.ErrNotFound
}

func sealed(id, kind, base, pt string) []byte {
	return append(credential.AD(id, kind, base, ""), pt...)
}

func build(gen int64, refused bool) *snapshot.Snapshot {
	return snapshot.Build(&store.Config{
		Generation: gen,
		Upstreams: []store.Upstream{
			{ID: "up_key", Name: "team-key", Kind: store.KindVendorAPIKey, BaseURL: "http://a", Enabled: true,
				Credential: sealed("up_key", store.KindVendorAPIKey, "http://a", "sk"), CredentialKind: credential.APIKey},
			{ID: "up_max", Name: "max-a", Kind: store.KindVendorOAuth, BaseURL: "http://b", Enabled: true,
				Credential: sealed("up_max", store.KindVendorOAuth, "http://b", `{"access_token":"at"}`), CredentialKind: credential.OAuth,
				Status: store.UpstreamStatus{RefreshRefused: refused}},
		},
		Principals: []store.Principal{
			{ID: "pr_a", Name: "alice", Enabled: true, DefaultLimits: []byte(`[{"kind":"usd","window_secs":86400,"limit":"5.00"}]`)},
			{ID: "pr_b", Name: "bob", Enabled: true, DefaultLimits: []byte(`[{"kind":"usd","window_secs":86400,"limit":"5.00"}]`)},
		},
	}, opener{}, time.Now())
}

type bench struct {
	w   *world
	st  worldStore
	clk *fakeclock.Clock
	reg *prometheus.Registry
}

func setup(t *testing.T) *bench {
	t.Helper()
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "a.db"), sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	w := &world{snap: build(10, false), stored: 10, quotas: map[string]*store.QuotaObservation{}, budgets: map[string]float64{"pr_a": 0.1, "pr_b": 0.1}}
	b := &bench{w: w, st: worldStore{st, w}, clk: fakeclock.New(time.Date(2026, 11, 20, 12, 0, 0, 0, time.UTC)), reg: prometheus.NewRegistry()}
	ctx := context.Background()
	for _, h := range []store.Webhook{
		{ID: "wh_all", Name: "all", URL: "https://hooks.example/all", Secret: []byte("x"), Enabled: true},
		{ID: "wh_budget", Name: "budget", URL: "https://hooks.example/b", Secret: []byte("x"), Enabled: true, Conditions: []string{alerts.PrincipalBudgetExhausted}},
		{ID: "wh_off", Name: "off", URL: "https://hooks.example/off", Secret: []byte("x"), Enabled: false},
	} {
		if _, err := st.CreateWebhook(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	return b
}

func (b *bench) evaluator(replica string) *alerts.Evaluator {
	var reg prometheus.Registerer
	if replica == "replica-1" {
		reg = b.reg
	}
	return alerts.New(alerts.Options{Snapshots: b.w, Store: b.st, Budgets: b.w, Queue: b.w, ReplicaID: replica,
		Clock: b.clk, Metrics: alerts.NewMetrics(reg)})
}

func (b *bench) set(f func(w *world)) {
	b.w.mu.Lock()
	defer b.w.mu.Unlock()
	f(b.w)
}

// Each condition reaches the webhooks subscribed to it once when it
// starts firing and once when it resolves, however many evaluations see
// it in between; a disabled webhook gets nothing.
func TestEachConditionNotifiedOncePerEpisode(t *testing.T) {
	b := setup(t)
	e := b.evaluator("replica-1")
	ctx := context.Background()
	resets := b.clk.Now().Add(3 * 24 * time.Hour)
	fiveReset := b.clk.Now().Add(2 * time.Hour)
	// 7-day window at 50 %, growing 1 % every 10 minutes: 100 % within
	// the 72 h left. The 5-hour window at 95 %.
	poll := func(step int) {
		b.set(func(w *world) {
			w.quotas["up_max"] = &store.QuotaObservation{UpstreamID: "up_max", ObservedAt: b.clk.Now(),
				FiveHour: store.QuotaWindow{Utilization: 95, ResetsAt: &fiveReset},
				SevenDay: store.QuotaWindow{Utilization: 50 + float64(step), ResetsAt: &resets}}
		})
	}
	b.set(func(w *world) {
		w.snap = build(10, true)
		w.stored = 12 // the replica serves 10
		w.budgets["pr_a"], w.budgets["pr_b"] = 0.85, 1.0
	})
	poll(0)
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	got, evs := b.w.take(t)
	want := []string{
		"wh_all:principal_budget_exhausted:pr_b:firing",
		"wh_all:principal_budget_high:pr_a:firing",
		"wh_all:upstream_credential_unusable:up_max:firing",
		"wh_all:upstream_quota_high:up_max:five_hour:firing",
		"wh_budget:principal_budget_exhausted:pr_b:firing",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("first evaluation delivered\n%q\nwant\n%q", got, want)
	}
	for _, ev := range evs {
		if ev.Rule == "" || ev.Episode != 1 || ev.Replica != "replica-1" || ev.Summary == "" || ev.Value == nil || !ev.At.Equal(b.clk.Now()) {
			t.Errorf("event %+v", ev)
		}
		if ev.Alert == alerts.UpstreamQuotaHigh && *ev.Value != 0.95 {
			t.Errorf("quota value %v", *ev.Value)
		}
	}
	// Ten minutes apart: the lag older than the grace fires, and once
	// the 7-day samples span 30 minutes the forecast does.
	for step := 1; step <= 3; step++ {
		b.clk.Advance(10 * time.Minute)
		poll(step)
		if err := e.Evaluate(ctx); err != nil {
			t.Fatal(err)
		}
		got, _ = b.w.take(t)
		var want []string
		switch step {
		case 1:
			want = []string{"wh_all:replica_config_behind:replica-1:firing"}
		case 3:
			want = []string{"wh_all:upstream_quota_forecast_exhausted:up_max:seven_day:firing"}
		}
		if !slices.Equal(got, want) {
			t.Fatalf("step %d delivered %q, want %q", step, got, want)
		}
	}
	if v := promtest.Value(t, b.reg, "svc_alert_conditions_firing", "condition", alerts.UpstreamQuotaForecastExhausted); v != 1 {
		t.Fatalf("svc_alert_conditions_firing forecast %v", v)
	}
	// Everything recovers: the credential is replaced, the replica
	// catches up, budgets and usage fall, the trend flattens out below.
	b.set(func(w *world) {
		w.snap = build(12, false)
		w.budgets["pr_a"], w.budgets["pr_b"] = 0.2, 0.2
	})
	for step := 4; step <= 40; step++ {
		b.clk.Advance(10 * time.Minute)
		b.set(func(w *world) {
			w.quotas["up_max"] = &store.QuotaObservation{UpstreamID: "up_max", ObservedAt: b.clk.Now(),
				FiveHour: store.QuotaWindow{Utilization: 10, ResetsAt: &resets},
				SevenDay: store.QuotaWindow{Utilization: 53, ResetsAt: &resets}}
		})
		if err := e.Evaluate(ctx); err != nil {
			t.Fatal(err)
		}
	}
	got, _ = b.w.take(t)
	want = []string{
		"wh_all:principal_budget_exhausted:pr_b:resolved",
		"wh_all:principal_budget_high:pr_a:resolved",
		"wh_all:replica_config_behind:replica-1:resolved",
		"wh_all:upstream_credential_unusable:up_max:resolved",
		"wh_all:upstream_quota_forecast_exhausted:up_max:seven_day:resolved",
		"wh_all:upstream_quota_high:up_max:five_hour:resolved",
		"wh_budget:principal_budget_exhausted:pr_b:resolved",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("recovery delivered\n%q\nwant\n%q", got, want)
	}
	if v := promtest.Value(t, b.reg, "svc_alert_notifications_total", "condition", alerts.PrincipalBudgetExhausted, "status", alerts.StatusResolved); v != 1 {
		t.Fatalf("svc_alert_notifications_total resolved %v", v)
	}
	// A second episode is a new delivery.
	b.set(func(w *world) { w.budgets["pr_b"] = 1.2 })
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	got, evs = b.w.take(t)
	if !slices.Equal(got, []string{"wh_all:principal_budget_exhausted:pr_b:firing", "wh_budget:principal_budget_exhausted:pr_b:firing"}) || evs[0].Episode != 2 {
		t.Fatalf("second episode %q %+v", got, evs)
	}
}

// A subject that goes away resolves its episode, named as it fired.
func TestGoneSubjectResolves(t *testing.T) {
	b := setup(t)
	e := b.evaluator("replica-1")
	ctx := context.Background()
	resets := b.clk.Now().Add(time.Hour)
	b.set(func(w *world) {
		w.quotas["up_max"] = &store.QuotaObservation{UpstreamID: "up_max", ObservedAt: b.clk.Now(), SevenDay: store.QuotaWindow{Utilization: 95, ResetsAt: &resets}}
	})
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.w.take(t); !slices.Equal(got, []string{"wh_all:upstream_quota_high:up_max:seven_day:firing"}) {
		t.Fatalf("quota: %q", got)
	}
	b.set(func(w *world) { delete(w.quotas, "up_max") }) // never polled again (its poll state was removed)
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	got, evs := b.w.take(t)
	if !slices.Equal(got, []string{"wh_all:upstream_quota_high:up_max:seven_day:resolved"}) || evs[0].Subject.Kind != "upstream" || evs[0].Subject.ID != "up_max" {
		t.Fatalf("gone quota: %q %+v", got, evs)
	}
	b.set(func(w *world) { w.budgets["pr_b"] = 1.0 })
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	b.w.take(t)
	b.set(func(w *world) { delete(w.budgets, "pr_b") }) // the budget was removed
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}
	got, evs = b.w.take(t)
	if !slices.Equal(got, []string{"wh_all:principal_budget_exhausted:pr_b:resolved", "wh_budget:principal_budget_exhausted:pr_b:resolved"}) ||
		evs[0].Subject.Kind != "principal" || evs[0].Value != nil {
		t.Fatalf("gone subject: %q %+v", got, evs)
	}
}

// Replicas evaluating the same state notify each change once between
// them; a replica never resolves another's lag.
func TestReplicasNotifyOnce(t *testing.T) {
	b := setup(t)
	one, two := b.evaluator("replica-1"), b.evaluator("replica-2")
	ctx := context.Background()
	b.set(func(w *world) { w.budgets["pr_b"] = 1.0; w.stored = 11 })
	for range 3 {
		for _, e := range []*alerts.Evaluator{one, two} {
			if err := e.Evaluate(ctx); err != nil {
				t.Fatal(err)
			}
		}
		b.clk.Advance(2 * time.Minute)
	}
	got, _ := b.w.take(t)
	want := []string{
		"wh_all:principal_budget_exhausted:pr_b:firing",
		"wh_all:replica_config_behind:replica-1:firing",
		"wh_all:replica_config_behind:replica-2:firing",
		"wh_budget:principal_budget_exhausted:pr_b:firing",
	}
	if !slices.Equal(got, want) {
		t.Fatalf("two replicas delivered\n%q\nwant\n%q", got, want)
	}
}

// Run evaluates at once and then each time the interval passes on the
// injected clock, stamping the events with that clock's time.
func TestRunEvaluatesOnTheInjectedClock(t *testing.T) {
	b := setup(t)
	e := b.evaluator("replica-1")
	start := b.clk.Now()
	b.set(func(w *world) { w.budgets["pr_b"] = 1.0 })
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); e.Run(ctx, time.Minute) }()
	<-b.clk.Armed() // the first evaluation has returned
	if got, evs := b.w.take(t); len(got) == 0 || !evs[0].At.Equal(start) {
		t.Fatalf("first evaluation: %q %+v", got, evs)
	}
	b.set(func(w *world) { w.budgets["pr_b"] = 0 })
	b.clk.Advance(time.Minute)
	<-b.clk.Armed()
	got, evs := b.w.take(t)
	if len(got) == 0 || !strings.HasSuffix(got[0], ":resolved") || !evs[0].At.Equal(start.Add(time.Minute)) {
		t.Fatalf("evaluation after the interval: %q %+v", got, evs)
	}
	cancel()
	<-done
}
