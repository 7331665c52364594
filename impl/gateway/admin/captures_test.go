package admin_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// A captured exchange is read through the admin API by the roles allowed
// to (auditor, operator, admin), opened from its sealed column, and each
// read is audited with its reader; a viewer is refused and leaves no
// trace; an event without a capture is a 404 with a stable code.
func TestCapturedExchangeReadByAllowedRoles(t *testing.T) {
	t.Parallel()
	e := setup(t)
	prompt := `{"model":"m","messages":[{"role":"user","content":"ask-7f3a"}]}`
	answer := "event: message_start\ndata: {}\n\n"
	row, err := capture.Seal(e.box, capture.Exchange{EventID: "ev_1", PrincipalID: "pr_1", At: time.Unix(1763700000, 0),
		Request: []byte(prompt), Response: []byte(answer), Truncated: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.InsertCapturedExchanges(context.Background(), []store.CapturedExchange{row}); err != nil {
		t.Fatal(err)
	}
	viewer := e.roleToken("viewer")
	wantErr(t, e.do("GET", "/admin/v1/request-events/ev_1/exchange", nil, bearer(viewer)...), 403, "forbidden")
	if n := len(e.audit("resource_kind=captured_exchange").Entries); n != 0 {
		t.Fatalf("a refused read was audited (%d entries)", n)
	}

	for _, role := range []string{"auditor", "operator"} {
		r := e.do("GET", "/admin/v1/request-events/ev_1/exchange", nil, bearer(e.roleToken(role))...)
		if r.status != 200 {
			t.Fatalf("%s: %d %s", role, r.status, r.body)
		}
		got := r.json(t)
		if got["request"] != prompt || got["response"] != answer || got["truncated"] != true || got["principal_id"] != "pr_1" ||
			got["event_id"] != "ev_1" || got["captured_at_unix_secs"] != float64(1763700000) {
			t.Fatalf("%s read %v", role, got)
		}
	}
	es := e.audit("resource_kind=captured_exchange").Entries
	if len(es) != 2 {
		t.Fatalf("audit %+v, want one entry per read", es)
	}
	for _, en := range es {
		if en.Action != "read" || en.ResourceID != "ev_1" || !strings.HasSuffix(en.Actor.TokenName, "-bot") {
			t.Fatalf("audit entry %+v", en)
		}
	}
	wantErr(t, e.do("GET", "/admin/v1/request-events/ev_none/exchange", nil), 404, "exchange_not_captured")
}

// A principal's capture switch: off unless asked; set by create and
// PATCH; a PUT replaces the principal, so one without it turns capture
// off; a PATCH naming another field keeps it; a value that is not a
// boolean is refused with invalid_request and nothing changed.
func TestPrincipalCaptureExchanges(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.principal("plain")
	if p["capture_exchanges"] != false {
		t.Fatalf("default capture %v", p["capture_exchanges"])
	}
	path := "/admin/v1/principals/" + p["id"].(string)
	e.unchanged("refused switches", func() {
		for _, bad := range []any{"yes", 1, map[string]any{}} {
			wantErr(t, e.do("PATCH", path, map[string]any{"capture_exchanges": bad}, "If-Match", "*"), 400, "invalid_request")
			wantErr(t, e.do("POST", "/admin/v1/principals", map[string]any{"name": "bad", "kind": "machine", "capture_exchanges": bad}), 400, "invalid_request")
		}
	})
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "audited", "kind": "machine", "capture_exchanges": true})
	if r.status != 201 || r.json(t)["capture_exchanges"] != true {
		t.Fatalf("create with capture: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", path, map[string]any{"capture_exchanges": true}, "If-Match", "*")
	if r.status != 200 || r.json(t)["capture_exchanges"] != true {
		t.Fatalf("patch on: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", path, map[string]any{"name": "plain2"}, "If-Match", "*")
	if r.status != 200 || r.json(t)["capture_exchanges"] != true {
		t.Fatalf("a patch of the name: %d %s", r.status, r.body)
	}
	if got := e.do("GET", path, nil).json(t)["capture_exchanges"]; got != true {
		t.Fatalf("read back %v", got)
	}
	r = e.do("PUT", path, map[string]any{"name": "plain", "kind": "machine"}, "If-Match", "*")
	if r.status != 200 || r.json(t)["capture_exchanges"] != false {
		t.Fatalf("a PUT without the field: %d %s", r.status, r.body)
	}
}

// The request log marks the events that have a captured exchange, and
// only those.
func TestRequestLogMarksCapturedEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	at := time.Now().Add(-time.Minute)
	if err := e.st.InsertRequestEvents(ctx, []store.RequestEvent{
		{ID: "ev_kept", At: at, PrincipalID: "pr_1", KeyID: "key_1", Model: "m", Status: 200},
		{ID: "ev_plain", At: at.Add(time.Second), PrincipalID: "pr_1", KeyID: "key_1", Model: "m", Status: 200},
	}); err != nil {
		t.Fatal(err)
	}
	row, err := capture.Seal(e.box, capture.Exchange{EventID: "ev_kept", PrincipalID: "pr_1", At: at, Request: []byte("{}"), Response: []byte("{}")})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.st.InsertCapturedExchanges(ctx, []store.CapturedExchange{row}); err != nil {
		t.Fatal(err)
	}
	evs := e.do("GET", "/admin/v1/request-log", nil).json(t)["events"].([]any)
	got := map[string]any{}
	for _, ev := range evs {
		m := ev.(map[string]any)
		got[m["id"].(string)] = m["captured"]
	}
	if len(got) != 2 || got["ev_kept"] != true || got["ev_plain"] != false {
		t.Fatalf("captured markers %v", got)
	}
}
