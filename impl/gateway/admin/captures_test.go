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
