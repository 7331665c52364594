package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Status describes the replica, the database and the
// snapshot it serves.
func TestStatus(t *testing.T) {
	t.Parallel()
	e := setup(t)
	e.upstream("u")
	pid := e.principal("p")["id"].(string)
	e.key(pid)
	r := e.do("GET", "/admin/v1/status", nil)
	if r.status != 200 {
		t.Fatalf("status: %d %s", r.status, r.body)
	}
	s := r.json(t)
	gen, _ := e.st.ConfigGeneration(context.Background())
	want := map[string]any{"status": "ok", "version": "test-version", "driver": "sqlite", "replica_id": "replica-1",
		"config_generation": float64(gen), "started_at_unix_secs": 1763700000.0}
	for k, v := range want {
		if s[k] != v {
			t.Errorf("%s = %v, want %v", k, s[k], v)
		}
	}
	snap := s["snapshot"].(map[string]any)
	if snap["generation"] != float64(gen) || snap["built_at_unix_secs"] != float64(now.Unix()) ||
		snap["upstreams"] != 1.0 || snap["principals"] != 1.0 || snap["keys"] != 1.0 {
		t.Fatalf("snapshot %v (generation %d)", snap, gen)
	}
}

// The recent request events, newest first, with limit and since filters.
func TestRequestEvents(t *testing.T) {
	t.Parallel()
	e := setup(t)
	var evs []store.RequestEvent
	for i := 0; i < 5; i++ {
		evs = append(evs, store.RequestEvent{ID: fmt.Sprintf("ev%d", i), At: now.Add(time.Duration(i) * time.Minute), PrincipalID: "pr", KeyID: "k",
			UpstreamID: "up", Model: "claude-x", Stream: i%2 == 0, Status: 200, InputTokens: int64(i), OutputTokens: 1, DurationMillis: 12})
	}
	if err := e.st.InsertRequestEvents(context.Background(), evs); err != nil {
		t.Fatal(err)
	}
	l := e.do("GET", "/admin/v1/request-events", nil).list(t)
	if len(l) != 5 || l[0].(map[string]any)["id"] != "ev4" || l[0].(map[string]any)["at_unix_secs"] != float64(now.Add(4*time.Minute).Unix()) {
		t.Fatalf("events %v", l)
	}
	if l := e.do("GET", "/admin/v1/request-events?limit=2", nil).list(t); len(l) != 2 {
		t.Fatalf("limit: %v", l)
	}
	since := now.Add(3 * time.Minute).Unix()
	if l := e.do("GET", fmt.Sprintf("/admin/v1/request-events?since_unix_secs=%d", since), nil).list(t); len(l) != 2 {
		t.Fatalf("since: %v", l)
	}
	for _, q := range []string{"limit=0", "limit=1001", "limit=x", "since_unix_secs=-1", "since_unix_secs=soon"} {
		wantErr(t, e.do("GET", "/admin/v1/request-events?"+q, nil), 400, "invalid_request")
	}
}

type fakeCatalog struct{}

func (fakeCatalog) Installed() (string, time.Time, json.RawMessage, bool) {
	return "2025-11-01", now, json.RawMessage(`{"models":{}}`), true
}

// The price catalog installed on this replica, or nulls before the first.
func TestPriceCatalog(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("GET", "/admin/v1/price-catalog", nil).json(t)
	if r["replica_id"] != "replica-1" || r["installed_version"] != nil || r["catalog"] != nil {
		t.Fatalf("before install: %v", r)
	}
	e = setup(t, func(o *options) { o.catalog = fakeCatalog{} })
	r = e.do("GET", "/admin/v1/price-catalog", nil).json(t)
	if r["installed_version"] != "2025-11-01" || r["installed_at_unix_secs"] != float64(now.Unix()) || fmt.Sprint(r["catalog"]) != "map[models:map[]]" {
		t.Fatalf("installed: %v", r)
	}
}

// The OpenAPI document is served as embedded, behind the token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("GET", "/admin/v1/openapi.json", nil)
	var doc struct {
		OpenAPI string         `json:"openapi"`
		Paths   map[string]any `json:"paths"`
	}
	if r.status != 200 || r.header.Get("Content-Type") != "application/json" || json.Unmarshal(r.body, &doc) != nil || doc.OpenAPI != "3.1.0" {
		t.Fatalf("openapi.json: %d %.200s", r.status, r.body)
	}
	if len(doc.Paths) != len(openAPI(t)["paths"].(map[string]any)) || !strings.Contains(string(r.body), "warmup_requires_oauth_credentials") {
		t.Fatal("served document differs from openapi.json")
	}
}

var _ admin.PriceCatalog = fakeCatalog{}
