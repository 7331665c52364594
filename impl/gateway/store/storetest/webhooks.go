package storetest

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseWebhooks(t *testing.T, open Opener) {
	t.Run("Webhooks", func(t *testing.T) { run(t, open, testWebhooks) })
	t.Run("AlertStates", func(t *testing.T) { run(t, open, testAlertStates) })
	t.Run("AlertStatesRace", func(t *testing.T) { run(t, open, testAlertStatesRace) })
}

// Webhooks: created at revision 1, names unique, updates and deletes
// checked against the revision, a nil secret keeps the stored one; every
// change audited, none moves the configuration generation.
func testWebhooks(t *testing.T, open Opener) {
	b := setup(t, open)
	gen := must(b.st.ConfigGeneration(b.ctx))
	w := must(b.st.CreateWebhook(b.ctx, store.Webhook{Name: "ops", URL: "https://hooks.example/ops", Secret: []byte("ct-1"),
		Conditions: []string{"principal_budget_high"}, Enabled: true}))
	if w.ID == "" || w.Revision != 1 || !w.Enabled || string(w.Secret) != "ct-1" || !slices.Equal(w.Conditions, []string{"principal_budget_high"}) ||
		!w.CreatedAt.Equal(b.clk.Now()) {
		t.Fatalf("created %+v", w)
	}
	_, err := b.st.CreateWebhook(b.ctx, store.Webhook{Name: "ops", URL: "https://x.example/", Secret: []byte("ct")})
	wantErr(t, err, store.ErrConflict)
	b.clk.Advance(time.Second) // lists order by creation time
	all := must(b.st.CreateWebhook(b.ctx, store.Webhook{Name: "all", URL: "https://x.example/", Secret: []byte("ct-all")}))
	if all.Conditions == nil || len(all.Conditions) != 0 || all.Enabled {
		t.Fatalf("no conditions, disabled: %+v", all)
	}
	b.clk.Advance(time.Second)
	_, err = b.st.UpdateWebhook(b.ctx, w.ID, 7, store.Webhook{Name: "ops", URL: w.URL})
	wantErr(t, err, store.ErrStaleRevision)
	u := must(b.st.UpdateWebhook(b.ctx, w.ID, 1, store.Webhook{Name: "ops2", URL: "https://hooks.example/other", Conditions: []string{"a", "b"}}))
	if u.Revision != 2 || u.Name != "ops2" || u.URL != "https://hooks.example/other" || string(u.Secret) != "ct-1" || u.Enabled ||
		!u.UpdatedAt.Equal(b.clk.Now()) || !u.CreatedAt.Equal(w.CreatedAt) {
		t.Fatalf("updated %+v", u)
	}
	b.clk.Advance(time.Second) // audit rows order by time
	u = must(b.st.UpdateWebhook(b.ctx, w.ID, store.AnyRevision, store.Webhook{Name: "ops2", URL: u.URL, Secret: []byte("ct-2"), Enabled: true}))
	if u.Revision != 3 || string(u.Secret) != "ct-2" || len(u.Conditions) != 0 {
		t.Fatalf("updated again %+v", u)
	}
	_, err = b.st.UpdateWebhook(b.ctx, "wh_missing", 1, store.Webhook{Name: "x"})
	wantErr(t, err, store.ErrNotFound)
	if ws := must(b.st.ListWebhooks(b.ctx)); len(ws) != 2 || ws[0].ID != w.ID || ws[1].ID != all.ID {
		t.Fatalf("list %+v", ws)
	}
	wantErr(t, b.st.DeleteWebhook(b.ctx, w.ID, 2), store.ErrStaleRevision)
	b.clk.Advance(time.Second)
	must(0, b.st.DeleteWebhook(b.ctx, w.ID, 3))
	_, err = b.st.GetWebhook(b.ctx, w.ID)
	wantErr(t, err, store.ErrNotFound)
	wantErr(t, b.st.DeleteWebhook(b.ctx, w.ID, store.AnyRevision), store.ErrNotFound)
	if g := must(b.st.ConfigGeneration(b.ctx)); g != gen {
		t.Fatalf("a webhook change moved the configuration generation to %d from %d", g, gen)
	}
	es := must(b.st.QueryAudit(b.ctx, store.AuditQuery{ResourceKind: "webhook", ResourceID: w.ID}))
	var actions []string
	for _, e := range es {
		actions = append(actions, e.Action)
	}
	if !slices.Equal(actions, []string{"delete", "update", "update", "create"}) {
		t.Fatalf("audit %q", actions)
	}
}

// An alert key moves firing → resolved → firing again, each move reported
// once; repeating a state reports nothing; a key first seen resolved is
// not stored.
func testAlertStates(t *testing.T, open Opener) {
	b := setup(t, open)
	t0 := b.clk.Now()
	st, changed := mustState(b, "k", false, t0)
	if changed || st.Firing || st.Episode != 0 {
		t.Fatalf("first seen resolved: %+v changed %v", st, changed)
	}
	st, changed = mustState(b, "k", true, t0.Add(time.Minute))
	if !changed || !st.Firing || st.Episode != 1 || !st.Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("fired: %+v changed %v", st, changed)
	}
	if st, changed = mustState(b, "k", true, t0.Add(2*time.Minute)); changed || st.Episode != 1 || !st.Since.Equal(t0.Add(time.Minute)) {
		t.Fatalf("still firing: %+v changed %v", st, changed)
	}
	if as := must(b.st.ListAlertStates(b.ctx)); len(as) != 1 || as[0].Key != "k" {
		t.Fatalf("firing %+v", as)
	}
	if st, changed = mustState(b, "k", false, t0.Add(3*time.Minute)); !changed || st.Firing || st.Episode != 1 {
		t.Fatalf("resolved: %+v changed %v", st, changed)
	}
	if _, changed = mustState(b, "k", false, t0.Add(4*time.Minute)); changed {
		t.Fatal("resolved twice")
	}
	if st, changed = mustState(b, "k", true, t0.Add(5*time.Minute)); !changed || st.Episode != 2 {
		t.Fatalf("second episode: %+v changed %v", st, changed)
	}
	if as := must(b.st.ListAlertStates(b.ctx)); len(as) != 1 {
		t.Fatalf("firing %+v", as)
	}
}

// Replicas evaluating the same condition at once: one of them moves it.
func testAlertStatesRace(t *testing.T, open Opener) {
	b := setup(t, open)
	var wg sync.WaitGroup
	var mu sync.Mutex
	moved := 0
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, changed, err := b.st.SetAlertState(b.ctx, "race", true, b.clk.Now())
			if err != nil {
				t.Error(err)
			}
			if changed {
				mu.Lock()
				moved++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if moved != 1 {
		t.Fatalf("%d callers moved the key, want 1", moved)
	}
}

func mustState(b *bundle, key string, firing bool, at time.Time) (store.AlertState, bool) {
	st, changed, err := b.st.SetAlertState(b.ctx, key, firing, at)
	must(0, err)
	return st, changed
}
