package alerts_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/alerts"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// A condition firing reaches every webhook through the durable
// scheduler: a receiver gets the event signed under its own secret; a
// receiver that is down is tried the class's attempts and its delivery
// ends Failed in the scheduler's failures view (the dead letter); a slow
// receiver's attempt times out and the retry delivers; a webhook whose
// URL moved to another origin without a new secret is never signed for
// (its delivery is Killed at once).
func TestDeliveriesReachReceivers(t *testing.T) {
	b := setup(t)
	ctx := context.Background()
	box, err := secret.New(make([]byte, secret.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	// Only these webhooks: drop the fixture's.
	for _, id := range []string{"wh_all", "wh_budget", "wh_off"} {
		if err := b.st.DeleteWebhook(ctx, id, store.AnyRevision); err != nil {
			t.Fatal(err)
		}
	}
	type delivery struct {
		body []byte
		sig  string
	}
	okRecv := make(chan delivery, 4)
	okSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		okRecv <- delivery{body, r.Header.Get(webhook.SignatureHeader)}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer okSrv.Close()
	var slowAttempts atomic.Int64
	slowDone, stop := make(chan struct{}), make(chan struct{})
	slowSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if slowAttempts.Add(1) == 1 {
			select { // answers after the sender gave up
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		w.WriteHeader(http.StatusNoContent)
		close(slowDone)
	}))
	defer slowSrv.Close()
	defer close(stop)
	// Nothing listens on port 1, and no listener is ever given it (it is
	// privileged and outside the ephemeral range); a closed listener's port
	// is handed to the next one opened, another test's receiver.
	downURL := "http://127.0.0.1:1/hook"

	add := func(id, url, key string) {
		ct, err := box.Seal([]byte(key), credential.WebhookAD(id, url))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.st.CreateWebhook(ctx, store.Webhook{ID: id, Name: id, URL: url, Secret: ct, Enabled: true}); err != nil {
			t.Fatal(err)
		}
	}
	add("wh_ok", okSrv.URL+"/a", "key-ok")
	add("wh_slow", slowSrv.URL, "key-slow")
	add("wh_down", downURL, "key-down")
	add("wh_moved", "https://hooks.example/x", "key-moved")
	// Moved to another origin, the old secret kept: it must not open.
	if _, err := b.st.UpdateWebhook(ctx, "wh_moved", store.AnyRevision, store.Webhook{Name: "wh_moved", URL: okSrv.URL + "/moved", Enabled: true}); err != nil {
		t.Fatal(err)
	}

	m := alerts.NewMetrics(b.reg)
	typ := alerts.DeliveryType(alerts.Targets{Store: b.st, Box: box}, service.Init(service.Options{}, &webhook.Sender{Client: &http.Client{}}), 300*time.Millisecond, m)
	typ.Class = scheduler.RetryClass{Name: "fast", MaxAttempts: 3, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "s.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	sched, err := scheduler.NewSQLite(ctx, db, []scheduler.Type{typ}, scheduler.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := sched.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = sched.Stop(c)
	})
	e := alerts.New(alerts.Options{Snapshots: b.w, Store: b.st, Budgets: b.w, Queue: sched, ReplicaID: "replica-1",
		Clock: b.clk, Metrics: m})
	b.set(func(w *world) { w.budgets["pr_b"] = 1.0 })
	if err := e.Evaluate(ctx); err != nil {
		t.Fatal(err)
	}

	select {
	case d := <-okRecv:
		if err := webhook.Verify([]byte("key-ok"), d.sig, d.body, time.Now(), time.Minute); err != nil {
			t.Fatalf("signature: %v", err)
		}
		var ev alerts.Event
		if err := json.Unmarshal(d.body, &ev); err != nil || ev.Alert != alerts.PrincipalBudgetExhausted || ev.Status != alerts.StatusFiring ||
			ev.Rule != "PillarPrincipalBudgetExhausted" || ev.Subject.ID != "pr_b" || ev.Subject.Name != "bob" || *ev.Value != 1 {
			t.Fatalf("event %s: %v", d.body, err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the receiver got nothing")
	}
	select {
	case <-slowDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("the slow receiver got no retry (%d attempts)", slowAttempts.Load())
	}
	view := httptest.NewServer(sched.Handler())
	defer view.Close()
	var got struct{ Failures []scheduler.Failure }
	// The dead letters are written by the scheduler's workers: read the
	// view until both are in it (bounded).
	for deadline := time.Now().Add(30 * time.Second); len(got.Failures) < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("failures view %+v", got.Failures)
		}
		resp, err := http.Get(view.URL + "/admin/scheduler/failures?job_type=" + webhook.JobType)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(body, &got); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
	}
	states := map[string]scheduler.Failure{}
	for _, f := range got.Failures {
		states[f.IdempotencyKey] = f
	}
	down := states["wh_down:principal_budget_exhausted:pr_b:1:firing"]
	moved := states["wh_moved:principal_budget_exhausted:pr_b:1:firing"]
	if down.State != scheduler.StateFailed || down.Attempt != 3 || down.LastError == "" {
		t.Errorf("receiver down: %+v, want Failed after 3 attempts", down)
	}
	if moved.State != scheduler.StateKilled || moved.Attempt != 1 {
		t.Errorf("moved webhook: %+v, want Killed at its first attempt", moved)
	}
	if len(got.Failures) != 2 {
		t.Errorf("failures %+v, want the two dead letters only", got.Failures)
	}
	for outcome, want := range map[string]float64{alerts.OutcomeDelivered: 2, alerts.OutcomeDeadLetter: 2, alerts.OutcomeRetrying: 3} {
		if v := promtest.Value(t, b.reg, "svc_alert_webhook_deliveries_total", "outcome", outcome); v != want {
			t.Errorf("svc_alert_webhook_deliveries_total{outcome=%q} %v, want %v", outcome, v, want)
		}
	}
}
