package admin_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/credential"
)

const whSecret = "whsec-0123456789abcdef"

// fakeAlerts records test sends and lists canned deliveries.
type fakeAlerts struct {
	mu   sync.Mutex
	sent []string
	down bool
}

func (f *fakeAlerts) SendTest(_ context.Context, id string) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, fmt.Errorf("%w: scheduler down", admin.ErrAlertsUnavailable)
	}
	f.sent = append(f.sent, id)
	return int64(len(f.sent)), nil
}

func (f *fakeAlerts) Deliveries(_ context.Context, id string) ([]admin.WebhookDelivery, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return nil, fmt.Errorf("%w: scheduler down", admin.ErrAlertsUnavailable)
	}
	return []admin.WebhookDelivery{{JobID: 7, Key: id + ":principal_budget_high:pr_1:1:firing", State: "Failed", Attempt: 5, MaxAttempts: 5, DeadLetter: true}}, nil
}

// A webhook is created with its secret sealed under the master key and
// bound to the webhook and its URL's origin; no answer, listing or audit
// entry carries the secret; replacements check the revision.
func TestWebhookLifecycle(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/webhooks", map[string]any{"name": "ops", "url": "https://hooks.example/ops", "secret": whSecret,
		"conditions": []string{"principal_budget_high", "principal_budget_high", "replica_config_behind"}})
	if r.status != 201 || r.header.Get("ETag") != `"1"` || !strings.HasPrefix(r.header.Get("Location"), "/admin/v1/webhooks/wh_") {
		t.Fatalf("create: %d %v %s", r.status, r.header, r.body)
	}
	w := r.json(t)
	id := w["id"].(string)
	if w["enabled"] != true || w["secret_set"] != true || len(w["conditions"].([]any)) != 2 {
		t.Fatalf("created %s", r.body)
	}
	stored, err := e.st.GetWebhook(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(stored.Secret, []byte(whSecret)) {
		t.Fatal("the secret is stored in the clear")
	}
	if pt, err := e.box.Open(stored.Secret, credential.WebhookAD(id, "https://hooks.example:443/other")); err != nil || string(pt) != whSecret {
		t.Fatalf("the secret does not open for its origin: %v", err)
	}
	if _, err := e.box.Open(stored.Secret, credential.WebhookAD(id, "https://evil.example/ops")); err == nil {
		t.Fatal("the secret opens for another origin")
	}
	if bytes.Contains(e.dbBytes(), []byte(whSecret)) {
		t.Fatal("the secret is on disk in the clear")
	}
	// A stale revision changes nothing.
	wantErr(t, e.do("PUT", "/admin/v1/webhooks/"+id, map[string]any{"name": "ops", "url": "https://hooks.example/ops2"}, "If-Match", `"9"`), 409, "stale_revision")
	// Same origin: the secret is kept.
	r = e.do("PUT", "/admin/v1/webhooks/"+id, map[string]any{"name": "ops", "url": "https://hooks.example/ops2", "enabled": false}, "If-Match", `"1"`)
	if r.status != 200 || r.header.Get("ETag") != `"2"` || r.json(t)["enabled"] != false || len(r.json(t)["conditions"].([]any)) != 0 {
		t.Fatalf("replace: %d %s", r.status, r.body)
	}
	// Another origin needs the secret again.
	wantErr(t, e.do("PUT", "/admin/v1/webhooks/"+id, map[string]any{"name": "ops", "url": "https://other.example/ops"}), 400, "secret_required")
	r = e.do("PUT", "/admin/v1/webhooks/"+id, map[string]any{"name": "ops", "url": "https://other.example/ops", "secret": whSecret + "-2"})
	if r.status != 200 {
		t.Fatalf("move: %d %s", r.status, r.body)
	}
	stored, _ = e.st.GetWebhook(context.Background(), id)
	if pt, err := e.box.Open(stored.Secret, credential.WebhookAD(id, "https://other.example/")); err != nil || string(pt) != whSecret+"-2" {
		t.Fatalf("the new secret does not open for the new origin: %v", err)
	}
	g := e.do("GET", "/admin/v1/webhooks/"+id, nil)
	if g.status != 200 || g.header.Get("ETag") != `"3"` {
		t.Fatalf("get: %d %v", g.status, g.header)
	}
	l := e.do("GET", "/admin/v1/webhooks", nil)
	if l.status != 200 || len(l.json(t)["webhooks"].([]any)) != 1 || len(l.json(t)["conditions"].([]any)) != 6 {
		t.Fatalf("list: %s", l.body)
	}
	audit := e.do("GET", "/admin/v1/audit?resource_kind=webhook", nil)
	if audit.status != 200 || len(audit.json(t)["entries"].([]any)) != 3 {
		t.Fatalf("audit: %s", audit.body)
	}
	for _, b := range [][]byte{r.body, g.body, l.body, audit.body, []byte(e.logs.String())} {
		if bytes.Contains(b, []byte(whSecret)) {
			t.Fatalf("the secret leaked: %s", b)
		}
	}
	wantErr(t, e.do("DELETE", "/admin/v1/webhooks/"+id, nil, "If-Match", `"1"`), 409, "stale_revision")
	if d := e.do("DELETE", "/admin/v1/webhooks/"+id, nil, "If-Match", `"3"`); d.status != 204 {
		t.Fatalf("delete: %d %s", d.status, d.body)
	}
	wantErr(t, e.do("GET", "/admin/v1/webhooks/"+id, nil), 404, "webhook_not_found")
	wantErr(t, e.do("DELETE", "/admin/v1/webhooks/"+id, nil), 404, "webhook_not_found")
}

// Bad bodies are refused with their code and store nothing; a message
// never repeats the secret.
func TestWebhookRefusals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	good := func() map[string]any {
		return map[string]any{"name": "ops", "url": "https://hooks.example/ops", "secret": whSecret}
	}
	with := func(k string, v any) map[string]any {
		b := good()
		if v == nil {
			delete(b, k)
		} else {
			b[k] = v
		}
		return b
	}
	for _, c := range []struct {
		body   map[string]any
		status int
		code   string
	}{
		{with("secret", nil), 400, "invalid_request"},
		{with("secret", "short"), 400, "invalid_request"},
		{with("name", ""), 400, "invalid_request"},
		{with("url", "ftp://hooks.example/"), 400, "invalid_location"},
		{with("url", "https://user:pw@hooks.example/"), 400, "invalid_location"},
		{with("conditions", []string{"principal_budget_high", "disk_full"}), 400, "unknown_condition"},
		{with("extra", true), 400, "invalid_request"},
	} {
		r := e.do("POST", "/admin/v1/webhooks", c.body)
		wantErr(t, r, c.status, c.code)
		if bytes.Contains(r.body, []byte(whSecret)) {
			t.Fatalf("refusal repeats the secret: %s", r.body)
		}
	}
	if ws, err := e.st.ListWebhooks(context.Background()); err != nil || len(ws) != 0 {
		t.Fatalf("refused bodies stored %v %v", ws, err)
	}
	if r := e.do("POST", "/admin/v1/webhooks", good()); r.status != 201 {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("POST", "/admin/v1/webhooks", good()), 409, "conflict")
	wantErr(t, e.do("PUT", "/admin/v1/webhooks/wh_missing", good()), 404, "webhook_not_found")
}

// A test send goes to the scheduler for an enabled webhook only; the
// deliveries list marks dead letters; without the scheduler the test is
// refused.
func TestWebhookTestAndDeliveries(t *testing.T) {
	t.Parallel()
	fa := &fakeAlerts{}
	e := setup(t, func(o *options) { o.alerts = fa })
	id := e.do("POST", "/admin/v1/webhooks", map[string]any{"name": "ops", "url": "https://hooks.example/ops", "secret": whSecret}).json(t)["id"].(string)
	off := e.do("POST", "/admin/v1/webhooks", map[string]any{"name": "off", "url": "https://hooks.example/off", "secret": whSecret, "enabled": false}).json(t)["id"].(string)
	if r := e.do("POST", "/admin/v1/webhooks/"+id+"/test", nil); r.status != 202 || r.json(t)["job_id"] != float64(1) {
		t.Fatalf("test: %d %s", r.status, r.body)
	}
	wantErr(t, e.do("POST", "/admin/v1/webhooks/"+off+"/test", nil), 409, "webhook_disabled")
	wantErr(t, e.do("POST", "/admin/v1/webhooks/wh_missing/test", nil), 404, "webhook_not_found")
	if len(fa.sent) != 1 || fa.sent[0] != id {
		t.Fatalf("sent %v", fa.sent)
	}
	r := e.do("GET", "/admin/v1/webhooks/"+id+"/deliveries", nil)
	ds := r.json(t)["deliveries"].([]any)
	if r.status != 200 || len(ds) != 1 || ds[0].(map[string]any)["dead_letter"] != true {
		t.Fatalf("deliveries: %d %s", r.status, r.body)
	}
	// A replica whose scheduler did not start answers 503, not 500.
	fa.mu.Lock()
	fa.down = true
	fa.mu.Unlock()
	wantErr(t, e.do("POST", "/admin/v1/webhooks/"+id+"/test", nil), 503, "alerts_not_configured")
	wantErr(t, e.do("GET", "/admin/v1/webhooks/"+id+"/deliveries", nil), 503, "alerts_not_configured")
	bare := setup(t)
	id = bare.do("POST", "/admin/v1/webhooks", map[string]any{"name": "ops", "url": "https://hooks.example/ops", "secret": whSecret}).json(t)["id"].(string)
	wantErr(t, bare.do("POST", "/admin/v1/webhooks/"+id+"/test", nil), 503, "alerts_not_configured")
	if r := bare.do("GET", "/admin/v1/webhooks/"+id+"/deliveries", nil); r.status != 200 || len(r.json(t)["deliveries"].([]any)) != 0 {
		t.Fatalf("deliveries without a scheduler: %s", r.body)
	}
}

// The firing alerts are listed with the rules file's alert names.
func TestAlertsList(t *testing.T) {
	t.Parallel()
	e := setup(t)
	if _, _, err := e.st.SetAlertState(context.Background(), "principal_budget_exhausted:pr_1", true, now); err != nil {
		t.Fatal(err)
	}
	r := e.do("GET", "/admin/v1/alerts", nil)
	as := r.json(t)["alerts"].([]any)
	if r.status != 200 || len(as) != 1 {
		t.Fatalf("alerts: %s", r.body)
	}
	a := as[0].(map[string]any)
	if a["rule"] != "PillarPrincipalBudgetExhausted" || a["subject"] != "pr_1" || a["episode"] != float64(1) {
		t.Fatalf("alert %v", a)
	}
}
