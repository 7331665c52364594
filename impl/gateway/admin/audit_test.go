package admin_test

import (
	"encoding/json"
	"net/url"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/testing/promtest"
	"github.com/prometheus/client_golang/prometheus"
)

type auditPage struct {
	Entries []struct {
		ID    string `json:"id"`
		Actor struct {
			Kind, Subject, Issuer, Remote string
			TokenName                     string `json:"token_name"`
		} `json:"actor"`
		Action       string          `json:"action"`
		ResourceKind string          `json:"resource_kind"`
		ResourceID   string          `json:"resource_id"`
		Before       json.RawMessage `json:"before"`
		After        json.RawMessage `json:"after"`
	} `json:"entries"`
	NextCursor *string `json:"next_cursor"`
}

func (e *env) audit(query string, hdr ...string) auditPage {
	e.t.Helper()
	r := e.do("GET", "/admin/v1/audit?"+query, nil, hdr...)
	if r.status != 200 {
		e.t.Fatalf("audit %s: %d %s", query, r.status, r.body)
	}
	var p auditPage
	if err := json.Unmarshal(r.body, &p); err != nil {
		e.t.Fatal(err)
	}
	return p
}

// GET /admin/v1/audit names who changed what: the kind of credential, the
// subject, the scoped token's name and the client address, with the
// resource before and after and no secret in either; changes are counted
// by actor kind.
func TestAuditNamesWhoChangedWhat(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	e := setup(t, func(o *options) { o.reg = reg })
	op := e.roleToken("operator")
	up := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_value": "sk-ant-secret-create"}, bearer(op)...).json(t)
	id := up["id"].(string)
	r := e.do("PATCH", "/admin/v1/upstreams/"+id, map[string]any{"name": "renamed"}, append(bearer(op), "If-Match", "*")...)
	if r.status != 200 {
		t.Fatalf("patch %d %s", r.status, r.body)
	}
	pr := e.principal("p")["id"].(string)
	key := e.do("POST", "/admin/v1/principals/"+pr+"/keys", map[string]any{"name": "k"}, bearer(op)...).json(t)["key"].(string)
	if r := e.do("DELETE", "/admin/v1/upstreams/"+id, nil, append(bearer(op), "If-Match", "*")...); r.status != 204 && r.status != 200 {
		t.Fatalf("delete %d %s", r.status, r.body)
	}

	p := e.audit("actor_kind=token&resource_kind=upstream")
	if len(p.Entries) != 3 {
		t.Fatalf("want create, update, delete by the token: %+v", p.Entries)
	}
	del, upd, cre := p.Entries[0], p.Entries[1], p.Entries[2]
	if cre.Action != "create" || upd.Action != "update" || del.Action != "delete" {
		t.Fatalf("actions %s %s %s", cre.Action, upd.Action, del.Action)
	}
	for _, x := range p.Entries {
		if x.Actor.Kind != "token" || x.Actor.TokenName != "operator-bot" || !strings.HasPrefix(x.Actor.Remote, "127.0.0.1:") || x.ResourceID != id {
			t.Fatalf("actor %+v", x)
		}
	}
	var b, a map[string]any
	json.Unmarshal(upd.Before, &b)
	json.Unmarshal(upd.After, &a)
	if b["name"] != "u" || a["name"] != "renamed" {
		t.Fatalf("update before %s after %s", upd.Before, upd.After)
	}
	if cre.Before != nil && string(cre.Before) != "null" || !strings.Contains(string(cre.After), `"name":"u"`) {
		t.Fatalf("create before %s after %s", cre.Before, cre.After)
	}
	if !strings.Contains(string(del.Before), `"renamed"`) || string(del.After) != "null" {
		t.Fatalf("delete before %s after %s", del.Before, del.After)
	}
	all := e.do("GET", "/admin/v1/audit?limit=500", nil)
	for _, s := range []string{"sk-ant-secret-create", key, op} {
		if strings.Contains(string(all.body), s) {
			t.Fatalf("the audit trail holds a secret")
		}
	}
	issue := e.audit("resource_kind=key&action=issue").Entries
	if len(issue) != 1 || !strings.Contains(string(issue[0].After), `"key":"[redacted]"`) {
		t.Fatalf("key issue %+v", issue)
	}
	// Break-glass changes (the principal, the tokens) are told apart.
	if bg := e.audit("actor_kind=break_glass"); len(bg.Entries) < 2 || bg.Entries[0].Actor.Subject != "break-glass" {
		t.Fatalf("break-glass %+v", bg.Entries)
	}
	if got := promtest.Value(t, reg, "svc_admin_changes_total", "actor_kind", "token"); got != 4 {
		// create, update, issue, delete by the token
		t.Fatalf("svc_admin_changes_total{actor_kind=token} = %v, want 4", got)
	}
}

// Pages follow each other without gaps or repeats; filters and bad
// parameters answer as documented; an auditor reads, a viewer may not.
func TestAuditPagingAndFilters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		e.principal(n)
	}
	full := e.audit("limit=500").Entries
	var paged []string
	q := "limit=2"
	for range 10 {
		p := e.audit(q)
		for _, x := range p.Entries {
			paged = append(paged, x.ID)
		}
		if p.NextCursor == nil {
			break
		}
		q = "limit=2&cursor=" + url.QueryEscape(*p.NextCursor)
	}
	if len(paged) != len(full) {
		t.Fatalf("paged %d, full %d", len(paged), len(full))
	}
	for i := range full {
		if full[i].ID != paged[i] {
			t.Fatalf("page order differs at %d", i)
		}
	}
	one := full[2]
	if p := e.audit("resource_id=" + one.ResourceID); len(p.Entries) != 1 || p.Entries[0].ID != one.ID {
		t.Fatalf("by resource %+v", p.Entries)
	}
	for _, bad := range []string{"limit=0", "limit=501", "since_unix_secs=x", "cursor=!!!", "cursor=bm9waXBl", "who=me", "since_unix_secs=10&until_unix_secs=5"} {
		wantErr(t, e.do("GET", "/admin/v1/audit?"+bad, nil), 400, "invalid_request")
	}
	if p := e.audit("limit=500", bearer(e.roleToken("auditor"))...); len(p.Entries) != len(full)+1 {
		t.Fatalf("auditor sees %d entries, want %d", len(p.Entries), len(full)+1)
	}
	wantErr(t, e.do("GET", "/admin/v1/audit", nil, bearer(e.roleToken("viewer"))...), 403, "forbidden")
}
