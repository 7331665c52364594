package admin_test

import (
	"context"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Status and the overview show each upstream's routing state: its weight,
// when its cooldown ends (null when none) and its requests in flight.
func TestStatusAndOverviewShowRoutingState(t *testing.T) {
	t.Parallel()
	board := routing.NewBoard(nil)
	e := setup(t, func(o *options) { o.routing = board })
	ctx := context.Background()
	cool, err := e.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "cool", Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	busy, err := e.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "busy", Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	board.CoolDown(cool.ID, now.Add(90*time.Second))
	defer board.Begin(busy.ID).End()
	type state struct {
		Name          string `json:"name"`
		Weight        *int   `json:"weight"`
		CooldownUntil *int64 `json:"cooldown_until_unix_secs"`
		InFlight      int64  `json:"in_flight"`
	}
	check := func(where string, got []state) {
		t.Helper()
		if len(got) != 2 {
			t.Fatalf("%s: %d upstreams, want 2", where, len(got))
		}
		for _, u := range got {
			if u.Weight == nil {
				t.Errorf("%s: %s has no weight", where, u.Name)
			}
			switch u.Name {
			case "cool":
				if u.CooldownUntil == nil || *u.CooldownUntil != now.Add(90*time.Second).Unix() || u.InFlight != 0 {
					t.Errorf("%s: cool %+v", where, u)
				}
			case "busy":
				if u.CooldownUntil != nil || u.InFlight != 1 {
					t.Errorf("%s: busy %+v", where, u)
				}
			}
		}
	}
	st := decodeInto[struct {
		Routing []state `json:"routing"`
	}](t, e.do("GET", "/admin/v1/status", nil))
	check("status", st.Routing)
	ov := decodeInto[struct {
		Upstreams []state `json:"upstreams"`
	}](t, e.do("GET", "/admin/v1/overview", nil))
	check("overview", ov.Upstreams)
}

// An upstream's weight: 1 unless given; set on create, PUT and PATCH (kept
// by a PUT that omits it); outside 0 to 1000 refused with nothing changed.
func TestUpstreamWeight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u := e.upstream("plain")
	if u["weight"] != float64(1) {
		t.Fatalf("default weight %v", u["weight"])
	}
	id := u["id"].(string)
	p := "/admin/v1/upstreams/" + id
	e.unchanged("refused weights", func() {
		for _, bad := range []any{-1, 1001, 1.5, "2"} {
			wantErr(t, e.do("PATCH", p, map[string]any{"weight": bad}, "If-Match", "*"), 400, "invalid_request")
			wantErr(t, e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "bad", "kind": "vendor_api_key", "base_url": "https://api.example",
				"api_key_value": "sk-ant-x", "weight": bad}), 400, "invalid_request")
		}
		wantMessage(t, e.do("PATCH", p, map[string]any{"weight": 5000}, "If-Match", "*"), "weight")
	})
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "heavy", "kind": "vendor_api_key", "base_url": "https://api.example",
		"api_key_value": "sk-ant-heavy", "weight": 7})
	if r.status != 201 || r.json(t)["weight"] != float64(7) {
		t.Fatalf("create with weight: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", p, map[string]any{"weight": 0}, "If-Match", "*")
	if r.status != 200 || r.json(t)["weight"] != float64(0) {
		t.Fatalf("patch to standby: %d %s", r.status, r.body)
	}
	r = e.do("PUT", p, map[string]any{"name": "plain", "base_url": "https://api.example"}, "If-Match", "*")
	if r.status != 200 || r.json(t)["weight"] != float64(0) {
		t.Fatalf("a PUT without weight changed it: %d %s", r.status, r.body)
	}
	r = e.do("PUT", p, map[string]any{"name": "plain", "base_url": "https://api.example", "weight": 4}, "If-Match", "*")
	if r.status != 200 || r.json(t)["weight"] != float64(4) {
		t.Fatalf("PUT weight: %d %s", r.status, r.body)
	}
}
