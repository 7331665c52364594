package relay

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A principal's default_limits refuse past max with Anthropic's 429
// rate_limit_error and Retry-After; the refused request reaches no upstream,
// is recorded, and count_tokens is not limited.
func TestDefaultLimitsRefuseWith429(t *testing.T) {
	t.Parallel()
	var sn seen
	up := upstreamServer(t, &sn, nil)
	cfg := fixtureConfig(apiKeyUpstream("up_1", up.URL, "sk-upstream"))
	cfg.Principals[0].DefaultLimits = json.RawMessage(`[{"kind":"requests","window_secs":60,"max":2}]`)
	// The start of a minute: the retry-after is exact.
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lim := limits.New(limits.Options{Clock: fakeclock.New(now)})
	rec := &memRecorder{}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	srv := httptest.NewServer(New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Recorder: rec, Limiter: lim, Metrics: m}))
	t.Cleanup(srv.Close)
	hdr := map[string]string{"x-api-key": "sk-good"}
	body := `{"model":"claude-x","max_tokens":5,"messages":[]}`
	for i := 0; i < 2; i++ {
		resp, b := post(t, srv.URL+"/v1/messages", hdr, body)
		if resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
		// The principal's own standing, as Anthropic reports limits.
		wantLimitHeaders(t, resp.Header, "Requests", "2", strconv.Itoa(1-i), "2026-03-01T12:02:00Z")
	}
	resp, b := post(t, srv.URL+"/v1/messages", hdr, body)
	wantAnthropicError(t, resp, b, 429, "rate_limit_error")
	wantLimitHeaders(t, resp.Header, "Requests", "2", "0", "2026-03-01T12:02:00Z")
	if v := resp.Header.Get("Anthropic-Ratelimit-Tokens-Limit"); v != "" {
		t.Fatalf("tokens limit header %q for a principal without a tokens limit", v)
	}
	// Two requests at the minute's start: one falls out of the sliding
	// estimate 30 s into the next minute.
	if ra := resp.Header.Get("Retry-After"); ra != "90" {
		t.Fatalf("Retry-After %q, want 90", ra)
	}
	// Longer than the SDKs wait: they are told not to retry.
	if sr := resp.Header.Get("X-Should-Retry"); sr != "false" {
		t.Fatalf("x-should-retry %q with Retry-After 90, want false", sr)
	}
	if !strings.Contains(b, "2 requests per 60s") {
		t.Fatalf("message does not name the limit: %s", b)
	}
	if n := len(sn.headers); n != 2 {
		t.Fatalf("upstream saw %d requests, want 2", n)
	}
	if resp, b := post(t, srv.URL+"/v1/messages/count_tokens", hdr, body); resp.StatusCode != 200 {
		t.Fatalf("count_tokens limited: %d %s", resp.StatusCode, b)
	}
	// Two answers, the refusal and count_tokens; an answer's event is
	// handed over after the client has it, so order is not asserted.
	evs := rec.wait(t, 4)
	refusals := 0
	for _, e := range evs {
		if e.Status == 429 {
			refusals++
			if e.ErrorType != "rate_limit_error" || e.PrincipalID != "pr_a" {
				t.Fatalf("refusal recorded as %+v", e)
			}
		}
	}
	if len(evs) != 4 || refusals != 1 {
		t.Fatalf("events %+v: want 4 with one refusal", evs)
	}
	if v := testutil.ToFloat64(m.limitedBy[limits.Requests]); v != 1 {
		t.Fatalf("svc_proxy_principal_limited_total{kind=requests} = %v, want 1", v)
	}
}

// A wait a client can sit out (up to a minute) is sent with
// x-should-retry: true, so the official SDKs retry after Retry-After.
func TestShortLimitWaitIsRetryable(t *testing.T) {
	t.Parallel()
	var sn seen
	up := upstreamServer(t, &sn, nil)
	cfg := fixtureConfig(apiKeyUpstream("up_1", up.URL, "sk-upstream"))
	cfg.Principals[0].DefaultLimits = json.RawMessage(`[{"kind":"requests","window_secs":10,"max":1}]`)
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	lim := limits.New(limits.Options{Clock: fakeclock.New(now)})
	srv := httptest.NewServer(New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Recorder: &memRecorder{}, Limiter: lim}))
	t.Cleanup(srv.Close)
	hdr := map[string]string{"x-api-key": "sk-good"}
	body := `{"model":"claude-x","max_tokens":5,"messages":[]}`
	if resp, b := post(t, srv.URL+"/v1/messages", hdr, body); resp.StatusCode != 200 {
		t.Fatalf("first request: %d %s", resp.StatusCode, b)
	}
	resp, b := post(t, srv.URL+"/v1/messages", hdr, body)
	wantAnthropicError(t, resp, b, 429, "rate_limit_error")
	ra, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
	if ra < 1 || ra > 60 || resp.Header.Get("X-Should-Retry") != "true" {
		t.Fatalf("Retry-After %q, x-should-retry %q: want a short wait, retryable", resp.Header.Get("Retry-After"), resp.Header.Get("X-Should-Retry"))
	}
}

func wantLimitHeaders(t *testing.T, h http.Header, kind, limit, remaining, reset string) {
	t.Helper()
	for suffix, want := range map[string]string{"Limit": limit, "Remaining": remaining, "Reset": reset} {
		if got := h.Get("Anthropic-Ratelimit-" + kind + "-" + suffix); got != want {
			t.Errorf("anthropic-ratelimit-%s-%s %q, want %q", kind, suffix, got, want)
		}
	}
}

// A principal with limits gets its own anthropic-ratelimit-* headers
// instead of the API-key upstream's (organisation limits that are not the
// client's), on streams as on single answers; without limits the
// upstream's pass unchanged.
func TestPrincipalLimitHeadersReplaceUpstreams(t *testing.T) {
	t.Parallel()
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Anthropic-Ratelimit-Requests-Limit", "4000")
		w.Header().Set("Anthropic-Ratelimit-Input-Tokens-Limit", "400000")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"id":"msg_1","type":"message","usage":{"input_tokens":5,"output_tokens":2}}`)
	}))
	t.Cleanup(up.Close)
	cfg := fixtureConfig(apiKeyUpstream("up_1", up.URL, "sk-upstream"))
	cfg.Principals[0].DefaultLimits = json.RawMessage(`[{"kind":"tokens","window_secs":3600,"max":50000},{"kind":"requests","window_secs":60,"max":10}]`)
	now := time.Date(2026, 3, 1, 12, 0, 30, 0, time.UTC)
	lim := limits.New(limits.Options{Clock: fakeclock.New(now)})
	srv := httptest.NewServer(New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Recorder: &memRecorder{}, Limiter: lim}))
	t.Cleanup(srv.Close)
	hdr := map[string]string{"x-api-key": "sk-good"}
	body := `{"model":"claude-x","max_tokens":5,"messages":[]}`
	lim.AddTokens("pr_a", snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0)).Principal("pr_a").Limits, 1234)
	resp, b := post(t, srv.URL+"/v1/messages", hdr, body)
	if resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	wantLimitHeaders(t, resp.Header, "Requests", "10", "9", "2026-03-01T12:02:00Z")
	wantLimitHeaders(t, resp.Header, "Tokens", "50000", "48766", "2026-03-01T14:00:00Z")
	if v := resp.Header.Get("Anthropic-Ratelimit-Input-Tokens-Limit"); v != "" {
		t.Fatalf("the upstream's input-tokens limit %q reached a principal with its own limits", v)
	}

	cfg.Principals[0].DefaultLimits = nil
	free := httptest.NewServer(New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Recorder: &memRecorder{}, Limiter: lim}))
	t.Cleanup(free.Close)
	resp, _ = post(t, free.URL+"/v1/messages", hdr, body)
	if v := resp.Header.Get("Anthropic-Ratelimit-Requests-Limit"); v != "4000" {
		t.Fatalf("upstream's requests limit %q without principal limits, want 4000", v)
	}
}

// Writing the headers costs two allocations, whatever the kinds.
func TestLimitHeadersAllocations(t *testing.T) {
	st := limits.Status{}
	st[limits.Requests] = limits.Standing{Max: 100, Remaining: 42, Reset: time.Date(2026, 3, 1, 12, 2, 0, 0, time.UTC)}
	st[limits.Tokens] = limits.Standing{Max: 100000, Remaining: 99000, Reset: time.Date(2026, 3, 1, 14, 0, 0, 0, time.UTC)}
	h := http.Header{}
	setLimitHeaders(h, &st)
	wantLimitHeaders(t, h, "Tokens", "100000", "99000", "2026-03-01T14:00:00Z")
	if n := testing.AllocsPerRun(100, func() { setLimitHeaders(h, &st) }); n > 2 {
		t.Fatalf("%v allocations, want at most 2", n)
	}
}
