package admin_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// operatorFixture is a principal "alice", a principal "bob" and an API-key
// upstream "main" in the store.
type operatorFixture struct {
	alice, bob, up string
}

func newOperatorFixture(t *testing.T, e *env) operatorFixture {
	t.Helper()
	ctx := context.Background()
	var f operatorFixture
	for name, dst := range map[string]*string{"alice": &f.alice, "bob": &f.bob} {
		p, err := e.st.CreatePrincipal(ctx, store.Principal{Name: name, Kind: "machine", Enabled: true, AllowedModels: []string{"claude-*"}})
		if err != nil {
			t.Fatal(err)
		}
		*dst = p.ID
	}
	u, err := e.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "main", Kind: store.KindVendorAPIKey, BaseURL: "https://api.example",
		Enabled: true, Credential: []byte("ct"), CredentialKind: "api_key"})
	if err != nil {
		t.Fatal(err)
	}
	f.up = u.ID
	return f
}

func (e *env) events(evs ...store.RequestEvent) {
	e.t.Helper()
	if err := e.st.InsertRequestEvents(context.Background(), evs); err != nil {
		e.t.Fatal(err)
	}
}

func decodeInto[T any](t *testing.T, r resp) T {
	t.Helper()
	var v T
	if r.status != 200 {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	if err := json.Unmarshal(r.body, &v); err != nil {
		t.Fatalf("%s: %v", r.body, err)
	}
	return v
}

type trafficBody struct {
	FromUnix int64 `json:"from_unix_secs"`
	LiveFrom int64 `json:"live_from_unix_secs"`
	Series   []struct {
		PrincipalName string  `json:"principal_name"`
		UpstreamName  string  `json:"upstream_name"`
		Requests      []int64 `json:"requests"`
		Errors        []int64 `json:"errors"`
		Tokens        []int64 `json:"tokens"`
	} `json:"series"`
}

// The traffic view: every hour of the range (zeros where nothing ran), names
// instead of ids, and the current hour from the events even when the
// rollup job last ran before the newest of them.
func TestTrafficFullAxisLiveHourAndNames(t *testing.T) {
	t.Parallel()
	e := setup(t)
	f := newOperatorFixture(t, e)
	ctx := context.Background()
	hour := now.UTC().Truncate(time.Hour)
	old := hour.Add(-3 * time.Hour)
	e.events(store.RequestEvent{At: old.Add(10 * time.Minute), PrincipalID: f.alice, KeyID: "k", UpstreamID: f.up, Model: "m", Status: 200, InputTokens: 5, OutputTokens: 1},
		store.RequestEvent{At: now.Add(-20 * time.Minute), PrincipalID: f.alice, KeyID: "k", UpstreamID: f.up, Model: "m", Status: 200, InputTokens: 10, OutputTokens: 2})
	if _, err := e.st.RollupUsage(ctx, old, hour.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	// After the job's run: only the events can show it.
	e.events(store.RequestEvent{At: now.Add(-time.Minute), PrincipalID: f.alice, KeyID: "k", UpstreamID: f.up, Model: "m", Status: 500})

	got := decodeInto[trafficBody](t, e.do("GET", "/admin/v1/traffic?hours=6", nil))
	if got.FromUnix != hour.Add(-5*time.Hour).Unix() || got.LiveFrom != hour.Add(-time.Hour).Unix() || len(got.Series) != 1 {
		t.Fatalf("traffic %+v", got)
	}
	s := got.Series[0]
	if s.PrincipalName != "alice" || s.UpstreamName != "main" {
		t.Fatalf("names %q %q", s.PrincipalName, s.UpstreamName)
	}
	if fmt.Sprint(s.Requests, s.Errors, s.Tokens) != "[0 0 1 0 0 2] [0 0 0 0 0 1] [0 0 6 0 0 12]" {
		t.Fatalf("series %v %v %v", s.Requests, s.Errors, s.Tokens)
	}
	for _, bad := range []string{"hours=0", "hours=169", "hours=x", "principal=x"} {
		wantErr(t, e.do("GET", "/admin/v1/traffic?"+bad, nil), 400, "invalid_request")
	}
}

type logBody struct {
	Events []struct {
		ID            string `json:"id"`
		PrincipalName string `json:"principal_name"`
		UpstreamName  string `json:"upstream_name"`
		Status        int    `json:"status"`
		FirstByte     *int64 `json:"ttfb_ms"`
	} `json:"events"`
	NextCursor *string `json:"next_cursor"`
}

// The request log: filters combine, keyset pages are newest first and
// complete, bad parameters are refused with invalid_request.
func TestRequestLogFiltersAndPages(t *testing.T) {
	t.Parallel()
	e := setup(t)
	f := newOperatorFixture(t, e)
	var want []string
	for i := 0; i < 7; i++ {
		st := []int{200, 200, 429, 500, 200, 502, 200}[i]
		id := fmt.Sprintf("ev_%d", i)
		want = append([]string{id}, want...)
		e.events(store.RequestEvent{ID: id, At: now.Add(-time.Duration(60-i) * time.Second), PrincipalID: f.alice, KeyID: "k", UpstreamID: f.up,
			Model: []string{"claude-a", "claude-b"}[i%2], Status: st, FirstByteMillis: int64(i)})
	}
	e.events(store.RequestEvent{ID: "ev_bob", At: now.Add(-2 * time.Hour), PrincipalID: f.bob, KeyID: "k", Model: "claude-a", Status: 401})
	want = append(want, "ev_bob")

	var seen []string
	cursor := ""
	for page := 0; page < 5; page++ {
		q := url.Values{"limit": {"3"}}
		if cursor != "" {
			q.Set("cursor", cursor)
		}
		b := decodeInto[logBody](t, e.do("GET", "/admin/v1/request-log?"+q.Encode(), nil))
		for _, ev := range b.Events {
			seen = append(seen, ev.ID)
		}
		if b.NextCursor == nil {
			break
		}
		cursor = *b.NextCursor
	}
	if fmt.Sprint(seen) != fmt.Sprint(want) {
		t.Fatalf("pages %v, want %v", seen, want)
	}

	ids := func(q string) string {
		b := decodeInto[logBody](t, e.do("GET", "/admin/v1/request-log?"+q, nil))
		var out []string
		for _, ev := range b.Events {
			out = append(out, ev.ID)
		}
		return fmt.Sprint(out)
	}
	for q, w := range map[string]string{
		"principal=" + f.bob:        "[ev_bob]",
		"status=5xx":                "[ev_5 ev_3]",
		"status=error":              "[ev_5 ev_3 ev_2 ev_bob]",
		"status=429":                "[ev_2]",
		"model=claude-b&status=2xx": "[ev_1]",
		"model=claude-c":            "[]",
		"model=claude-a&status=2xx": "[ev_6 ev_4 ev_0]",
		fmt.Sprintf("since_unix_secs=%d&until_unix_secs=%d", now.Add(-58*time.Second).Unix(), now.Add(-55*time.Second).Unix()): "[ev_4 ev_3 ev_2]",
	} {
		if got := ids(q); got != w {
			t.Errorf("%s: %s, want %s", q, got, w)
		}
	}
	// Time to first byte: as recorded, null where none was measured.
	for _, ev := range decodeInto[logBody](t, e.do("GET", "/admin/v1/request-log?limit=10", nil)).Events {
		i := strings.TrimPrefix(ev.ID, "ev_")
		switch {
		case i == "0" || i == "bob":
			if ev.FirstByte != nil {
				t.Fatalf("%s: ttfb_ms %d, want null", ev.ID, *ev.FirstByte)
			}
		case ev.FirstByte == nil || fmt.Sprint(*ev.FirstByte) != i:
			t.Fatalf("%s: ttfb_ms %v", ev.ID, ev.FirstByte)
		}
	}
	b := decodeInto[logBody](t, e.do("GET", "/admin/v1/request-log?principal="+f.bob, nil))
	if b.Events[0].PrincipalName != "bob" || b.Events[0].UpstreamName != "" {
		t.Fatalf("names %+v", b.Events[0])
	}
	for _, bad := range []string{"status=abc", "status=600", "status=6xx", "status=0429", "limit=0", "limit=501", "limit=x",
		"cursor=%21%21", "cursor=" + url.QueryEscape("bm90LWEtY3Vyc29y"), "since_unix_secs=-1", "since_unix_secs=10&until_unix_secs=10", "principal_id=x"} {
		wantErr(t, e.do("GET", "/admin/v1/request-log?"+bad, nil), 400, "invalid_request")
	}
}

type overviewBody struct {
	LastHour struct {
		Requests          int64    `json:"requests"`
		Errors            int64    `json:"errors"`
		ErrorRate         *float64 `json:"error_rate"`
		RequestsPerMinute float64  `json:"requests_per_minute"`
		P50               *int64   `json:"latency_p50_ms"`
		P95               *int64   `json:"latency_p95_ms"`
		Sample            int      `json:"latency_sample"`
		FirstByteP50      *int64   `json:"ttfb_p50_ms"`
		FirstByteP95      *int64   `json:"ttfb_p95_ms"`
		FirstByteSample   int      `json:"ttfb_sample"`
	} `json:"last_hour"`
	TodayByModel []struct {
		Model        string `json:"model"`
		Requests     int64  `json:"requests"`
		InputTokens  int64  `json:"input_tokens"`
		OutputTokens int64  `json:"output_tokens"`
	} `json:"today_by_model"`
	TodayByPrincipal []struct {
		PrincipalName string `json:"principal_name"`
		Requests      int64  `json:"requests"`
	} `json:"today_by_principal"`
	Snapshot  *struct{ Generation int64 } `json:"snapshot"`
	Upstreams []struct {
		Name   string          `json:"name"`
		Kind   string          `json:"kind"`
		Limits json.RawMessage `json:"limits"`
	} `json:"upstreams"`
}

// The overview: rate over five minutes, error rate and latency over the
// hour, today's tokens per model and per principal (UTC day, current hour
// live), every upstream with its stored OAuth windows.
func TestOverview(t *testing.T) {
	t.Parallel()
	e := setup(t)
	f := newOperatorFixture(t, e)
	ctx := context.Background()
	if _, err := e.st.CreateUpstream(ctx, store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://api.example", Enabled: true}); err != nil {
		t.Fatal(err)
	}
	empty := decodeInto[overviewBody](t, e.do("GET", "/admin/v1/overview", nil))
	if empty.LastHour.ErrorRate != nil || empty.LastHour.P50 != nil || empty.LastHour.FirstByteP50 != nil || len(empty.TodayByModel) != 0 || len(empty.Upstreams) != 2 {
		t.Fatalf("empty overview %s", e.do("GET", "/admin/v1/overview", nil).body)
	}
	day := now.UTC().Truncate(24 * time.Hour)
	ev := func(at time.Time, p string, status int, ms int64, model string) store.RequestEvent {
		// An answer relayed from the upstream has its first byte at a tenth
		// of the duration; a refusal (429 here) has none.
		var ttfb int64
		if status == 200 {
			ttfb = max(1, ms/10)
		}
		return store.RequestEvent{At: at, PrincipalID: p, KeyID: "k", UpstreamID: f.up, Model: model, Status: status, DurationMillis: ms,
			FirstByteMillis: ttfb, InputTokens: 100, OutputTokens: 10}
	}
	e.events(ev(day.Add(-time.Minute), f.alice, 200, 1, "claude-a"), // yesterday
		ev(day.Add(2*time.Hour), f.alice, 200, 1, "claude-a"), // today, rolled up below
		ev(now.Add(-50*time.Minute), f.bob, 200, 400, "claude-b"),
		ev(now.Add(-4*time.Minute), f.alice, 200, 100, "claude-a"),
		ev(now.Add(-3*time.Minute), f.alice, 429, 10, "claude-a"),
		ev(now.Add(-2*time.Minute), f.alice, 200, 200, "claude-a"))
	if _, err := e.st.RollupUsage(ctx, day.Add(-time.Hour), day.Add(3*time.Hour)); err != nil {
		t.Fatal(err)
	}
	got := decodeInto[overviewBody](t, e.do("GET", "/admin/v1/overview", nil))
	lh := got.LastHour
	if lh.Requests != 4 || lh.Errors != 1 || lh.ErrorRate == nil || *lh.ErrorRate != 0.25 || lh.RequestsPerMinute != 0.6 ||
		*lh.P50 != 100 || *lh.P95 != 400 || lh.Sample != 4 {
		t.Fatalf("last hour %+v", lh)
	}
	// Time to first byte over the three relayed answers (10, 20, 40 ms).
	if lh.FirstByteSample != 3 || lh.FirstByteP50 == nil || *lh.FirstByteP50 != 20 || *lh.FirstByteP95 != 40 {
		t.Fatalf("time to first byte: p50 %v p95 %v of %d", lh.FirstByteP50, lh.FirstByteP95, lh.FirstByteSample)
	}
	if fmt.Sprint(got.TodayByModel) != "[{claude-a 4 400 40} {claude-b 1 100 10}]" {
		t.Fatalf("today by model %v", got.TodayByModel)
	}
	if fmt.Sprint(got.TodayByPrincipal) != "[{alice 4} {bob 1}]" {
		t.Fatalf("today by principal %v", got.TodayByPrincipal)
	}
	if got.Snapshot == nil {
		t.Fatal("no snapshot")
	}
	for _, u := range got.Upstreams {
		if (u.Kind == store.KindVendorOAuth) == (string(u.Limits) == "null") {
			t.Fatalf("upstream %s limits %s", u.Name, u.Limits)
		}
	}
	wantErr(t, e.do("GET", "/admin/v1/overview?x=1", nil), 400, "invalid_request")
}

// A browser opening the admin root without a token is sent to the
// dashboard; an API client with a token still gets the API's 404.
func TestAdminRootRedirectsToTheDashboard(t *testing.T) {
	t.Parallel()
	e := setup(t, func(o *options) {
		o.dashboard = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "shell") })
	})
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for _, m := range []string{"GET", "HEAD"} {
		req, _ := http.NewRequest(m, e.srv.URL+"/", nil)
		res, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusSeeOther || res.Header.Get("Location") != "/dashboard/" {
			t.Fatalf("%s /: %d %q", m, res.StatusCode, res.Header.Get("Location"))
		}
	}
	wantErr(t, send(t, e.srv.URL, "POST", "/", "{}", "Authorization", ""), 401, "unauthorized")
	wantErr(t, send(t, e.srv.URL, "GET", "/", nil), 404, "not_found")
}

// Both request listings say which dialect the client spoke: "messages" or
// "openai", null on an event recorded before the dialect was kept.
func TestRequestListingsNameTheDialect(t *testing.T) {
	t.Parallel()
	e := setup(t)
	f := newOperatorFixture(t, e)
	for id, d := range map[string]string{"ev_openai": store.DialectOpenAI, "ev_messages": store.DialectMessages, "ev_old": ""} {
		e.events(store.RequestEvent{ID: id, At: now.Add(-time.Minute), PrincipalID: f.alice, KeyID: "k", Model: "claude-a", Status: 200, Dialect: d})
	}
	type listing struct {
		Events []struct {
			ID      string  `json:"id"`
			Dialect *string `json:"dialect"`
		} `json:"events"`
	}
	want := map[string]string{"ev_openai": `"openai"`, "ev_messages": `"messages"`, "ev_old": "null"}
	for _, path := range []string{"/admin/v1/request-log?limit=10", "/admin/v1/request-events?limit=10"} {
		r := e.do("GET", path, nil)
		var l listing
		if err := json.Unmarshal(r.body, &l); err != nil {
			// /admin/v1/request-events answers a bare array.
			if err := json.Unmarshal(r.body, &l.Events); err != nil {
				t.Fatalf("%s: %d %s", path, r.status, r.body)
			}
		}
		got := map[string]string{}
		for _, ev := range l.Events {
			got[ev.ID] = "null"
			if ev.Dialect != nil {
				got[ev.ID] = strconv.Quote(*ev.Dialect)
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("%s: dialects %v, want %v", path, got, want)
		}
	}
}
