package admin_test

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func cost(n int64) *int64 { return &n }

type usageBody struct {
	LiveFrom int64    `json:"live_from_unix_secs"`
	GroupBy  []string `json:"group_by"`
	Rows     []struct {
		PrincipalID      *string `json:"principal_id"`
		PrincipalName    *string `json:"principal_name"`
		KeyID            *string `json:"key_id"`
		UpstreamName     *string `json:"upstream_name"`
		Model            *string `json:"model"`
		Requests         int64   `json:"requests"`
		Errors           int64   `json:"errors"`
		InputTokens      int64   `json:"input_tokens"`
		CostUSD          string  `json:"cost_usd"`
		CostNanos        int64   `json:"cost_nanos"`
		UnpricedRequests int64   `json:"unpriced_requests"`
	} `json:"rows"`
	Total struct {
		Requests  int64  `json:"requests"`
		CostUSD   string `json:"cost_usd"`
		Unpriced  int64  `json:"unpriced_requests"`
		CacheW1h  int64  `json:"cache_creation_1h_input_tokens"`
		CostNanos int64  `json:"cost_nanos"`
	} `json:"total"`
}

// The usage report: grouped by any subset of the dimensions over a range,
// rolled-up hours and live events together, exact decimal costs, unpriced
// requests apart.
func TestUsageReportGroupsAndTotals(t *testing.T) {
	t.Parallel()
	e := setup(t)
	f := newOperatorFixture(t, e)
	hour := now.UTC().Truncate(time.Hour)
	old := hour.Add(-5 * time.Hour)
	e.events(
		store.RequestEvent{At: old.Add(time.Minute), PrincipalID: f.alice, KeyID: "k1", UpstreamID: f.up, Model: "claude-a", Status: 200, InputTokens: 10, CostNanos: cost(1_500_000_000), PriceVersion: "v1", CacheCreation1hInputTokens: 3, CacheCreationInputTokens: 3},
		store.RequestEvent{At: old.Add(2 * time.Minute), PrincipalID: f.bob, KeyID: "k2", UpstreamID: f.up, Model: "claude-b", Status: 500},
	)
	if _, err := e.st.RollupUsage(context.Background(), old, hour.Add(-time.Hour)); err != nil {
		t.Fatal(err)
	}
	e.events(store.RequestEvent{At: now.Add(-time.Minute), PrincipalID: f.alice, KeyID: "k3", UpstreamID: f.up, Model: "claude-a", Status: 200, InputTokens: 5, CostNanos: cost(1), PriceVersion: "v2"})
	q := url.Values{"from": {fmt.Sprint(old.Unix())}, "to": {fmt.Sprint(now.Unix() + 1)}}

	all := decodeInto[usageBody](t, e.do("GET", "/admin/v1/usage?"+q.Encode(), nil))
	if len(all.Rows) != 1 || all.Rows[0].PrincipalID != nil || all.Rows[0].Requests != 3 || all.Total.CostUSD != "1.500000001" ||
		all.Total.CostNanos != 1_500_000_001 || all.Total.Unpriced != 1 || all.Total.CacheW1h != 3 || len(all.GroupBy) != 0 {
		t.Fatalf("total %+v", all)
	}
	q.Set("group_by", "principal,model")
	byPM := decodeInto[usageBody](t, e.do("GET", "/admin/v1/usage?"+q.Encode(), nil))
	if len(byPM.Rows) != 2 {
		t.Fatalf("rows %+v", byPM.Rows)
	}
	var got []string
	for _, r := range byPM.Rows {
		if r.KeyID != nil || r.UpstreamName != nil || r.PrincipalName == nil || r.Model == nil {
			t.Fatalf("dimensions of %+v", r)
		}
		got = append(got, fmt.Sprintf("%s/%s:%d:%s:%d", *r.PrincipalName, *r.Model, r.Requests, r.CostUSD, r.UnpricedRequests))
	}
	want := map[string]bool{"alice/claude-a:2:1.500000001:0": true, "bob/claude-b:1:0.00:1": true}
	for _, g := range got {
		if !want[g] {
			t.Fatalf("groups %v", got)
		}
	}
	q.Set("group_by", "key")
	q.Add("group_by", "upstream")
	byKey := decodeInto[usageBody](t, e.do("GET", "/admin/v1/usage?"+q.Encode(), nil))
	if len(byKey.Rows) != 3 || *byKey.Rows[0].KeyID != "k1" || *byKey.Rows[0].UpstreamName != "main" {
		t.Fatalf("by key %+v", byKey.Rows)
	}
	// The live hour alone.
	live := decodeInto[usageBody](t, e.do("GET", fmt.Sprintf("/admin/v1/usage?from=%d&to=%d", hour.Unix(), now.Unix()+1), nil))
	if live.Total.Requests != 1 || live.Total.CostUSD != "0.000000001" {
		t.Fatalf("live %+v", live.Total)
	}
}

// CSV: a header row naming the grouped dimensions and the totals, by
// format=csv or Accept: text/csv; names a spreadsheet would evaluate stay
// text.
func TestUsageReportCSV(t *testing.T) {
	t.Parallel()
	e := setup(t)
	ctx := context.Background()
	p, err := e.st.CreatePrincipal(ctx, store.Principal{Name: "=cmd", Kind: "machine", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	e.events(store.RequestEvent{At: now.Add(-time.Minute), PrincipalID: p.ID, KeyID: "k", Model: "m,1", Status: 200, InputTokens: 7, CostNanos: cost(25_000_000_000), PriceVersion: "v1"})
	from := now.Add(-time.Hour).Unix()
	for _, tc := range []struct{ query, accept string }{
		{"&format=csv", ""},
		{"", "text/csv"},
	} {
		r := e.do("GET", fmt.Sprintf("/admin/v1/usage?from=%d&group_by=principal,model%s", from, tc.query), nil, "Accept", tc.accept)
		if r.status != 200 || !strings.HasPrefix(r.header.Get("Content-Type"), "text/csv") {
			t.Fatalf("%+v: %d %s %s", tc, r.status, r.header.Get("Content-Type"), r.body)
		}
		recs, err := csv.NewReader(strings.NewReader(string(r.body))).ReadAll()
		if err != nil {
			t.Fatal(err)
		}
		wantHeader := "principal_id,principal_name,model,requests,errors,input_tokens,output_tokens,cache_creation_input_tokens,cache_creation_1h_input_tokens,cache_read_input_tokens,cost_usd,unpriced_requests"
		if len(recs) != 2 || strings.Join(recs[0], ",") != wantHeader {
			t.Fatalf("csv %q", recs)
		}
		if row := recs[1]; row[0] != p.ID || row[1] != "'=cmd" || row[2] != "m,1" || row[3] != "1" || row[5] != "7" || row[10] != "25.00" {
			t.Fatalf("row %q", row)
		}
	}
	// format=json wins over Accept.
	if r := e.do("GET", fmt.Sprintf("/admin/v1/usage?from=%d&format=json", from), nil, "Accept", "text/csv"); !strings.HasPrefix(r.header.Get("Content-Type"), "application/json") {
		t.Fatalf("format=json answered %s", r.header.Get("Content-Type"))
	}
}

func TestUsageReportRefusesBadParameters(t *testing.T) {
	t.Parallel()
	e := setup(t)
	for q, code := range map[string]string{
		"from=x":                        "invalid_time_range",
		"from=-5":                       "invalid_time_range",
		"to=1.5":                        "invalid_time_range",
		"from=200&to=100":               "invalid_time_range",
		"from=100&to=100":               "invalid_time_range",
		"from=0&to=40000000":            "invalid_time_range",
		"group_by=team":                 "invalid_group_by",
		"group_by=model,model":          "invalid_group_by",
		"group_by=model&group_by=model": "invalid_group_by",
		"format=xml":                    "invalid_request",
		"hours=3":                       "invalid_request",
		"from=1&from=2":                 "invalid_request",
	} {
		wantErr(t, e.do("GET", "/admin/v1/usage?"+q, nil), 400, code)
	}
}

// A budget is a usd element with an exact decimal limit, stored in its
// canonical spelling; a bad one is 400 invalid_budget and changes nothing.
func TestPrincipalBudget(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.do("POST", "/admin/v1/principals", map[string]any{"name": "team", "kind": "machine",
		"default_limits": []any{map[string]any{"kind": "usd", "window_secs": 86400, "limit": "25"}}})
	if r.status != 201 {
		t.Fatalf("%d %s", r.status, r.body)
	}
	id := r.json(t)["id"].(string)
	if got := fmt.Sprint(r.json(t)["default_limits"]); got != "[map[kind:usd limit:25.00 window_secs:86400]]" {
		t.Fatalf("stored %s", got)
	}
	for _, bad := range []string{`"25.0000000001"`, `"-1"`, `"0"`, `25`, `"1e3"`, `"abc"`, `null`} {
		body := `{"default_limits":[{"kind":"usd","window_secs":86400,"limit":` + bad + `}]}`
		res := e.do("PATCH", "/admin/v1/principals/"+id, body)
		if res.status != 400 {
			t.Fatalf("%s: %d %s", bad, res.status, res.body)
		}
		if c := res.json(t)["error"].(map[string]any)["code"]; c != "invalid_budget" && !(bad == "25" && c == "invalid_request") {
			t.Fatalf("%s: code %v", bad, c)
		}
	}
	wantErr(t, e.do("PATCH", "/admin/v1/principals/"+id, `{"default_limits":[{"kind":"usd","window_secs":86400,"max":5}]}`), 400, "invalid_budget")
	if got := fmt.Sprint(e.do("GET", "/admin/v1/principals/"+id, nil).json(t)["default_limits"]); got != "[map[kind:usd limit:25.00 window_secs:86400]]" {
		t.Fatalf("changed by a refused update: %s", got)
	}
}
