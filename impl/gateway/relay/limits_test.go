package relay

import (
	"encoding/json"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
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
	lim := limits.New(limits.Options{Now: func() time.Time { return now }})
	rec := &memRecorder{}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	srv := httptest.NewServer(New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Recorder: rec, Limiter: lim, Metrics: m}))
	t.Cleanup(srv.Close)
	hdr := map[string]string{"x-api-key": "sk-good"}
	body := `{"model":"claude-x","max_tokens":5,"messages":[]}`
	for i := 0; i < 2; i++ {
		if resp, b := post(t, srv.URL+"/v1/messages", hdr, body); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	resp, b := post(t, srv.URL+"/v1/messages", hdr, body)
	wantAnthropicError(t, resp, b, 429, "rate_limit_error")
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
	evs := rec.events()
	if last := evs[len(evs)-2]; last.Status != 429 || last.ErrorType != "rate_limit_error" || last.PrincipalID != "pr_a" {
		t.Fatalf("refusal recorded as %+v", last)
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
	lim := limits.New(limits.Options{Now: func() time.Time { return now }})
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
