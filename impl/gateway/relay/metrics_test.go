package relay

import (
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// Usage series carry names, not ids, and a model label from a bounded set:
// what the principal's allowed list names exactly or the catalog lists,
// else "other". Resolved children are cached, so the steady state does
// not allocate.
func TestUsageMetricsBoundedLabels(t *testing.T) {
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://127.0.0.1:1", "k"))
	cfg.Upstreams[0].Name = "primary"
	cfg.Principals[0].Name = "ci-bot"
	cfg.Principals[0].AllowedModels = []string{"claude-x", "claude-*"}
	snap := snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))
	m := NewMetrics(prometheus.NewRegistry())
	known := func(model string) bool { return model == "claude-cataloged" }
	ev := func(model string, status int, upstream string) store.RequestEvent {
		return store.RequestEvent{PrincipalID: "pr_a", UpstreamID: upstream, Model: model, Status: status,
			InputTokens: 10, OutputTokens: 3, CacheReadInputTokens: 7, CacheCreationInputTokens: 2}
	}
	m.ObserveUsage(ev("claude-x", 200, "up_1"), snap, known)
	m.ObserveUsage(ev("claude-x", 529, "up_1"), snap, known)
	m.ObserveUsage(ev("claude-cataloged", 200, "up_1"), snap, known)
	for _, made := range []string{"claude-a", "claude-b", "claude-c"} {
		m.ObserveUsage(ev(made, 200, "up_1"), snap, known)
	}
	m.ObserveUsage(ev("claude-x", 429, ""), snap, known) // refused before dispatch

	for _, c := range []struct {
		labels []string
		want   float64
	}{
		{[]string{"ci-bot", "primary", "claude-x", "2xx"}, 1},
		{[]string{"ci-bot", "primary", "claude-x", "5xx"}, 1},
		{[]string{"ci-bot", "primary", "claude-cataloged", "2xx"}, 1},
		{[]string{"ci-bot", "primary", OtherModel, "2xx"}, 3},
		{[]string{"ci-bot", NoUpstream, "claude-x", "4xx"}, 1},
	} {
		if got := testutil.ToFloat64(m.usageRequests.WithLabelValues(c.labels...)); got != c.want {
			t.Errorf("svc_proxy_usage_requests_total%v = %v, want %v", c.labels, got, c.want)
		}
	}
	for typ, want := range map[string]float64{"input": 30, "output": 9, "cache_read": 21, "cache_write": 6} {
		if got := testutil.ToFloat64(m.usageTokens.WithLabelValues("ci-bot", "primary", OtherModel, typ)); got != want {
			t.Errorf("tokens %s of other models = %v, want %v", typ, got, want)
		}
	}
	// Made-up model names never became series.
	if n := testutil.CollectAndCount(m.usageRequests); n != 4*len(statusGroups) {
		t.Errorf("%d request series, want %d (4 label sets × status classes)", n, 4*len(statusGroups))
	}
	if n := testing.AllocsPerRun(200, func() { m.ObserveUsage(ev("claude-made-up", 200, "up_1"), snap, known) }); n != 0 {
		t.Errorf("ObserveUsage allocates %v times per event once warm", n)
	}

	// A renamed principal (a new generation) gets series under its new name.
	cfg.Generation, cfg.Principals[0].Name = 2, "ci-bot-2"
	m.ObserveUsage(ev("claude-x", 200, "up_1"), snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0)), known)
	if got := testutil.ToFloat64(m.usageRequests.WithLabelValues("ci-bot-2", "primary", "claude-x", "2xx")); got != 1 {
		t.Errorf("after the rename: %v", got)
	}
}

// Failed upstream attempts are counted by upstream name and class, those
// that failed over included; a relayed answer records its time to first
// byte on the event and in the histogram.
func TestUpstreamErrorsAndTimeToFirstByte(t *testing.T) {
	t.Parallel()
	overloaded := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(529)
		w.Write([]byte(`{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`))
	}))
	t.Cleanup(overloaded.Close)
	var sn seen
	good := upstreamServer(t, &sn, nil)
	cfg := fixtureConfig(apiKeyUpstream("up_dead", refusingURL, "sk-upstream"), apiKeyUpstream("up_busy", overloaded.URL, "sk-upstream"),
		apiKeyUpstream("up_good", good.URL, "sk-upstream"))
	rec := &memRecorder{}
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	srv := httptest.NewServer(New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Recorder: rec, Metrics: m}))
	t.Cleanup(srv.Close)
	hdr := map[string]string{"x-api-key": "sk-good"}
	if resp, b := post(t, srv.URL+"/v1/messages", hdr, `{"model":"claude-x","max_tokens":5,"messages":[]}`); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	for _, c := range []struct{ upstream, class string }{{"up_dead", "connect"}, {"up_busy", "529"}} {
		if got := testutil.ToFloat64(m.upstreamErrors.WithLabelValues(c.upstream, c.class)); got != 1 {
			t.Errorf("svc_proxy_upstream_errors_total{upstream=%s,class=%s} = %v, want 1", c.upstream, c.class, got)
		}
	}
	if n := testutil.CollectAndCount(m.upstreamErrors); n != 2*int(numErrorClasses) {
		t.Errorf("%d error series, want every class of the two failing upstreams", n)
	}
	evs := rec.wait(t, 1)
	if len(evs) != 1 || evs[0].FirstByteMillis < 1 || evs[0].FirstByteMillis > evs[0].DurationMillis {
		t.Fatalf("events %+v: want one with a time to first byte within its duration", evs)
	}
	if observed := promtest.Value(t, reg, "svc_proxy_time_to_first_byte_seconds"); observed != 1 {
		t.Fatalf("time to first byte observed %v times, want 1", observed)
	}
}
