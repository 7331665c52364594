package webhook_test

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

	_ "modernc.org/sqlite"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
)

// Deliveries run as durable jobs: a receiver that keeps failing is tried
// the class's attempts and its job ends Failed, one that refuses is tried
// once and ends Killed, both in the scheduler's failures view; a receiver
// that recovers gets the delivery on a retry.
func TestDeliveriesOnTheScheduler(t *testing.T) {
	var failing, refusing, recovering atomic.Int64
	srv := func(n *atomic.Int64, answer func(attempt int64) int) string {
		s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(answer(n.Add(1)))
		}))
		t.Cleanup(s.Close)
		return s.URL
	}
	tg := targets{
		"wh_failing":    {URL: srv(&failing, func(int64) int { return 503 }), Secret: secret},
		"wh_refusing":   {URL: srv(&refusing, func(int64) int { return 404 }), Secret: secret},
		"wh_recovering": {URL: srv(&recovering, func(a int64) int { return map[bool]int{true: 500, false: 204}[a < 2] }), Secret: secret},
	}
	typ := webhook.Type(tg, sender(), 10*time.Second)
	// The entity class's shape with millisecond delays.
	typ.Class = scheduler.RetryClass{Name: "fast", MaxAttempts: 3, Base: 5 * time.Millisecond, Max: 20 * time.Millisecond}
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "s.db")+"?_pragma=busy_timeout(20000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		t.Fatal(err)
	}
	db.SetMaxOpenConns(1)
	t.Cleanup(func() { db.Close() })
	s, err := scheduler.NewSQLite(context.Background(), db, []scheduler.Type{typ}, scheduler.Options{PollInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Stop(ctx)
	})
	for _, id := range []string{"wh_failing", "wh_refusing", "wh_recovering"} {
		p, _ := json.Marshal(webhook.Payload{WebhookID: id, Event: json.RawMessage(`{"alert":"replica_config_behind"}`)})
		if _, _, err := s.Enqueue(context.Background(), scheduler.Enqueue{Type: webhook.JobType, IdempotencyKey: id, Payload: p}); err != nil {
			t.Fatal(err)
		}
	}
	view := httptest.NewServer(s.Handler())
	defer view.Close()
	type failure struct {
		IdempotencyKey string `json:"idempotency_key"`
		State          string `json:"state"`
		Attempt        int    `json:"attempt"`
	}
	var got struct{ Failures []failure }
	// The jobs finish on the scheduler's workers: read the view until both
	// failures are in it (bounded).
	for deadline := time.Now().Add(30 * time.Second); len(got.Failures) < 2 || recovering.Load() < 2; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("failures view %+v; recovering receiver saw %d attempts", got.Failures, recovering.Load())
		}
		resp, err := http.Get(view.URL + "/admin/scheduler/failures?job_type=" + webhook.JobType)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err := json.Unmarshal(b, &got); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	states := map[string]failure{}
	for _, f := range got.Failures {
		states[f.IdempotencyKey] = f
	}
	if f := states["wh_failing"]; f.State != scheduler.StateFailed || f.Attempt != 3 || failing.Load() != 3 {
		t.Errorf("failing receiver: %+v after %d deliveries, want Failed after 3", f, failing.Load())
	}
	if f := states["wh_refusing"]; f.State != scheduler.StateKilled || f.Attempt != 1 || refusing.Load() != 1 {
		t.Errorf("refusing receiver: %+v after %d deliveries, want Killed after 1", f, refusing.Load())
	}
	if _, ok := states["wh_recovering"]; ok {
		t.Errorf("the recovered delivery is in the failures view")
	}
}
