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

// boundSessions is a fixed count of sessions per upstream.
type boundSessions map[string]int

func (b boundSessions) Bound(time.Time) map[string]int { return b }

// Status and the overview show the usage thresholds, the polled
// utilisation, whether it is past a threshold and the sessions bound.
func TestStatusShowsThresholdsUtilizationAndSessions(t *testing.T) {
	t.Parallel()
	board := routing.NewBoard(nil)
	e := setup(t, func(o *options) { o.routing = board; o.sessions = boundSessions{"placeholder": 1} })
	ctx := context.Background()
	ninety := 90
	full, err := e.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "full", Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true,
		MaxUtilization7d: &ninety})
	if err != nil {
		t.Fatal(err)
	}
	reset := now.Add(time.Hour)
	board.SetUsage(full.ID, store.QuotaWindows{FiveHour: store.QuotaWindow{Utilization: 12.5, ResetsAt: &reset}, SevenDay: store.QuotaWindow{Utilization: 93}})
	type state struct {
		Name     string  `json:"name"`
		Max5h    *int    `json:"max_utilization_5h"`
		Max7d    *int    `json:"max_utilization_7d"`
		Util5h   float64 `json:"utilization_5h_percent"`
		Util7d   float64 `json:"utilization_7d_percent"`
		Past     bool    `json:"past_threshold"`
		Sessions *int    `json:"sessions_bound"`
	}
	check := func(where string, got []state) {
		t.Helper()
		if len(got) != 1 {
			t.Fatalf("%s: %d upstreams", where, len(got))
		}
		u := got[0]
		if u.Max5h == nil || *u.Max5h != 0 || u.Max7d == nil || *u.Max7d != 90 || u.Util5h != 12.5 || u.Util7d != 93 || !u.Past ||
			u.Sessions == nil {
			t.Errorf("%s: %+v", where, u)
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

// The usage thresholds: none unless given; set on create, PUT and PATCH
// (kept by a PUT that omits them); outside 0 to 100 refused with
// invalid_request and nothing changed.
func TestUpstreamUsageThresholds(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u := e.upstream("plain")
	if u["max_utilization_5h"] != float64(0) || u["max_utilization_7d"] != float64(0) {
		t.Fatalf("default thresholds %v %v", u["max_utilization_5h"], u["max_utilization_7d"])
	}
	p := "/admin/v1/upstreams/" + u["id"].(string)
	e.unchanged("refused thresholds", func() {
		for _, field := range []string{"max_utilization_5h", "max_utilization_7d"} {
			for _, bad := range []any{-1, 101, 50.5, "80"} {
				wantErr(t, e.do("PATCH", p, map[string]any{field: bad}, "If-Match", "*"), 400, "invalid_request")
				wantErr(t, e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "bad", "kind": "vendor_api_key", "base_url": "https://api.example",
					"api_key_value": "sk-ant-x", field: bad}), 400, "invalid_request")
			}
			wantMessage(t, e.do("PATCH", p, map[string]any{field: 150}, "If-Match", "*"), field)
		}
	})
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "guarded", "kind": "vendor_api_key", "base_url": "https://api.example",
		"api_key_value": "sk-ant-g", "max_utilization_5h": 80, "max_utilization_7d": 95})
	if r.status != 201 || r.json(t)["max_utilization_5h"] != float64(80) || r.json(t)["max_utilization_7d"] != float64(95) {
		t.Fatalf("create with thresholds: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", p, map[string]any{"max_utilization_7d": 90}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_utilization_7d"] != float64(90) {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	r = e.do("PUT", p, map[string]any{"name": "plain", "base_url": "https://api.example", "max_utilization_5h": 70}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_utilization_7d"] != float64(90) || r.json(t)["max_utilization_5h"] != float64(70) {
		t.Fatalf("a PUT naming one threshold: %d %s", r.status, r.body)
	}
}

// A principal's cap on requests in flight: none unless given; set on
// create, PUT and PATCH; outside 0 to 10000 refused with invalid_request
// and nothing changed.
func TestPrincipalMaxInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	p := e.principal("agents")
	if p["max_in_flight"] != float64(0) {
		t.Fatalf("default cap %v", p["max_in_flight"])
	}
	path := "/admin/v1/principals/" + p["id"].(string)
	e.unchanged("refused caps", func() {
		for _, bad := range []any{-1, 10001, 2.5, "4"} {
			wantErr(t, e.do("PATCH", path, map[string]any{"max_in_flight": bad}, "If-Match", "*"), 400, "invalid_request")
			wantErr(t, e.do("POST", "/admin/v1/principals", map[string]any{"name": "bad", "kind": "machine", "max_in_flight": bad}), 400, "invalid_request")
		}
		wantMessage(t, e.do("PATCH", path, map[string]any{"max_in_flight": 20000}, "If-Match", "*"), "max_in_flight")
	})
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "capped", "kind": "machine", "max_in_flight": 4})
	if r.status != 201 || r.json(t)["max_in_flight"] != float64(4) {
		t.Fatalf("create with a cap: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", path, map[string]any{"max_in_flight": 6}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_in_flight"] != float64(6) {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	r = e.do("PUT", path, map[string]any{"name": "agents", "kind": "machine", "max_in_flight": 2}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_in_flight"] != float64(2) {
		t.Fatalf("put: %d %s", r.status, r.body)
	}
}

// An upstream's cap on requests in flight: none unless given; set on
// create, PUT and PATCH (kept by a PUT that omits it); outside 0 to
// 100000 refused with invalid_request and nothing changed.
func TestUpstreamMaxInFlight(t *testing.T) {
	t.Parallel()
	e := setup(t)
	u := e.upstream("plain")
	if u["max_in_flight"] != float64(0) {
		t.Fatalf("default cap %v", u["max_in_flight"])
	}
	p := "/admin/v1/upstreams/" + u["id"].(string)
	e.unchanged("refused caps", func() {
		for _, bad := range []any{-1, 100001, 2.5, "4"} {
			wantErr(t, e.do("PATCH", p, map[string]any{"max_in_flight": bad}, "If-Match", "*"), 400, "invalid_request")
			wantErr(t, e.do("PUT", p, map[string]any{"name": "plain", "base_url": "https://api.example", "max_in_flight": bad}, "If-Match", "*"), 400, "invalid_request")
			wantErr(t, e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "bad", "kind": "vendor_api_key", "base_url": "https://api.example",
				"api_key_value": "sk-ant-x", "max_in_flight": bad}), 400, "invalid_request")
		}
		wantMessage(t, e.do("PATCH", p, map[string]any{"max_in_flight": -3}, "If-Match", "*"), "max_in_flight")
	})
	r := e.do("POST", "/admin/v1/upstreams", map[string]any{"name": "capped", "kind": "vendor_api_key", "base_url": "https://api.example",
		"api_key_value": "sk-ant-capped", "max_in_flight": 2})
	if r.status != 201 || r.json(t)["max_in_flight"] != float64(2) {
		t.Fatalf("create with a cap: %d %s", r.status, r.body)
	}
	r = e.do("PATCH", p, map[string]any{"max_in_flight": 8}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_in_flight"] != float64(8) {
		t.Fatalf("patch: %d %s", r.status, r.body)
	}
	r = e.do("PUT", p, map[string]any{"name": "plain", "base_url": "https://api.example"}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_in_flight"] != float64(8) {
		t.Fatalf("a PUT without max_in_flight changed it: %d %s", r.status, r.body)
	}
	r = e.do("PUT", p, map[string]any{"name": "plain", "base_url": "https://api.example", "max_in_flight": 0}, "If-Match", "*")
	if r.status != 200 || r.json(t)["max_in_flight"] != float64(0) {
		t.Fatalf("PUT to no cap: %d %s", r.status, r.body)
	}
}

// fixedQueues is a fixed (in flight, queued) per key.
type fixedQueues map[string][2]int

func (f fixedQueues) State(key string) (int, int) { return f[key][0], f[key][1] }

// Status and the overview show each upstream's cap, its slots in use and
// its queue; status lists each capped principal's requests in flight and
// queued, as this replica knows them.
func TestStatusShowsCapsAndQueues(t *testing.T) {
	t.Parallel()
	ups, prs := fixedQueues{}, fixedQueues{}
	e := setup(t, func(o *options) { o.upstreamQueues, o.principalQueues = ups, prs })
	ctx := context.Background()
	two := 2
	capped, err := e.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "capped", Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true,
		MaxInFlight: &two})
	if err != nil {
		t.Fatal(err)
	}
	ups[capped.ID] = [2]int{2, 3}
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "agents", "kind": "machine", "max_in_flight": 4})
	if r.status != 201 {
		t.Fatalf("principal: %d %s", r.status, r.body)
	}
	pid := r.json(t)["id"].(string)
	prs[pid] = [2]int{4, 5}
	e.principal("uncapped")
	type state struct {
		Name        string `json:"name"`
		MaxInFlight *int   `json:"max_in_flight"`
		SlotsInUse  *int   `json:"slots_in_use"`
		Queued      *int   `json:"queued"`
	}
	check := func(where string, got []state) {
		t.Helper()
		if len(got) != 1 || got[0].MaxInFlight == nil || *got[0].MaxInFlight != 2 || got[0].SlotsInUse == nil || *got[0].SlotsInUse != 2 ||
			got[0].Queued == nil || *got[0].Queued != 3 {
			t.Fatalf("%s: %+v", where, got)
		}
	}
	st := decodeInto[struct {
		Routing   []state `json:"routing"`
		Admission []struct {
			PrincipalID string `json:"principal_id"`
			MaxInFlight int    `json:"max_in_flight"`
			InFlight    int    `json:"in_flight"`
			Queued      int    `json:"queued"`
		} `json:"admission"`
	}](t, e.do("GET", "/admin/v1/status", nil))
	check("status", st.Routing)
	if len(st.Admission) != 1 || st.Admission[0].PrincipalID != pid || st.Admission[0].MaxInFlight != 4 || st.Admission[0].InFlight != 4 || st.Admission[0].Queued != 5 {
		t.Fatalf("status admission %+v", st.Admission)
	}
	ov := decodeInto[struct {
		Upstreams []state `json:"upstreams"`
	}](t, e.do("GET", "/admin/v1/overview", nil))
	check("overview", ov.Upstreams)
}
