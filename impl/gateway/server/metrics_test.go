package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/gauges"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// buildTestGateway builds the runtime on a fresh SQLite file, with clk
// as the server's clock when it is not nil; closed when the test ends.
func buildTestGateway(t *testing.T, clk clock.Clock) (*gateway, store.Store) {
	t.Helper()
	dir := t.TempDir()
	e := env(map[string]string{"PROXY_ADMIN_TOKEN": "adm-token-for-tests"})
	cfg, err := ParseConfig([]string{"--database-url", "sqlite://" + filepath.Join(dir, "p.db"), "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.2:0"}, e, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	cfg.clock = clk
	log := slog.New(slog.DiscardHandler)
	sec, err := loadSecrets(cfg, e)
	if err != nil {
		t.Fatal(err)
	}
	stor, err := openStorage(context.Background(), cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	g, err := buildRuntime(context.Background(), cfg, stor, sec.box, e, log)
	if err != nil {
		stor.st.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { g.rec.Close(); _ = g.plugs.Close(context.Background()); stor.st.Close() })
	return g, stor.st
}

// newTestGateway builds the runtime the proxy serves from, on a SQLite
// file: the registry is the one /metrics serves.
func newTestGateway(t *testing.T) *gateway {
	t.Helper()
	g, st := buildTestGateway(t, nil)
	// Vectors are gathered once they have a child: a recorded request
	// through an upstream gives the labelled series of the proxy path one.
	up, err := st.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "primary", Kind: store.KindVendorAPIKey,
		BaseURL: "https://api.example", Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.rt.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	g.onEvent(store.RequestEvent{PrincipalID: "pr_x", UpstreamID: up.ID, Model: "m", Status: 200, InputTokens: 1, OutputTokens: 1})
	return g
}

// promtool check metrics would be clean: the whole registry, with the
// labelled series of the proxy path present, passes the same linter.
func TestMetricsRegistryLintsClean(t *testing.T) {
	g := newTestGateway(t)
	problems, err := testutil.GatherAndLint(g.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	names := gatheredNames(t, g)
	for _, want := range []string{"svc_proxy_requests_total", "svc_proxy_request_duration_seconds", "svc_proxy_usage_requests_total",
		"svc_proxy_usage_tokens_total", "svc_proxy_time_to_first_byte_seconds",
		// The state gauges of the alerting rules (package gauges).
		"svc_upstream_credential_state", "svc_config_generation_snapshot", "svc_config_generation_stored"} {
		if !names[want] {
			t.Errorf("%s not registered", want)
		}
	}
}

// The chart's Grafana dashboard is valid JSON and every query names a
// metric the proxy registers.
func TestGrafanaDashboardQueriesRegisteredMetrics(t *testing.T) {
	names := registeredNames(t, newTestGateway(t))

	path := filepath.Join("..", "..", "..", "charts", "proxy", "dashboards", "proxy.json")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var dash any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var exprs []string
	var walk func(v any, key string)
	walk = func(v any, key string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				walk(x, k)
			}
		case []any:
			for _, x := range v {
				walk(x, key)
			}
		case string:
			if key == "expr" || key == "definition" {
				exprs = append(exprs, v)
			}
		}
	}
	walk(dash, "")
	if len(exprs) < 10 {
		t.Fatalf("%d queries found in %s", len(exprs), path)
	}
	metric := regexp.MustCompile(`\b(svc_[a-z0-9_]+|process_[a-z0-9_]+|go_[a-z0-9_]+)\b`)
	for _, e := range exprs {
		found := metric.FindAllString(e, -1)
		if len(found) == 0 {
			t.Errorf("query names no proxy metric: %s", e)
		}
		for _, m := range found {
			base := m
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if b, ok := strings.CutSuffix(m, suffix); ok && names[b] {
					base = b
				}
			}
			if !names[base] {
				t.Errorf("query names %s, which the proxy does not register: %s", m, e)
			}
		}
	}
}

// On the real store, the upstream created without a credential is
// reported missing by name, and the served generation is the stored one.
func TestStateGaugesOnTheStore(t *testing.T) {
	g := newTestGateway(t)
	gen := g.rt.Current().Generation
	want := fmt.Sprintf(`
# HELP svc_config_generation_snapshot Configuration generation this replica serves.
# TYPE svc_config_generation_snapshot gauge
svc_config_generation_snapshot %d
# HELP svc_config_generation_stored Configuration generation stored in the database, read at the scrape.
# TYPE svc_config_generation_stored gauge
svc_config_generation_stored %d
# HELP svc_upstream_credential_state 1 for the state of each enabled upstream's credential (ok, refused, missing), 0 for the others.
# TYPE svc_upstream_credential_state gauge
svc_upstream_credential_state{state="missing",upstream="primary"} 1
svc_upstream_credential_state{state="ok",upstream="primary"} 0
svc_upstream_credential_state{state="refused",upstream="primary"} 0
`, gen, gen)
	if err := testutil.GatherAndCompare(g.reg, strings.NewReader(want),
		"svc_config_generation_snapshot", "svc_config_generation_stored", "svc_upstream_credential_state"); err != nil {
		t.Fatal(err)
	}
}

// The chart's alerting rules name only metrics the proxy registers.
func TestAlertingRulesNameRegisteredMetrics(t *testing.T) {
	names := registeredNames(t, newTestGateway(t))
	path := filepath.Join("..", "..", "..", "charts", "proxy", "alerts", "proxy.rules.yaml")
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	exprs := regexp.MustCompile(`(?m)^\s+expr: (?:\|\n)?((?:.|\n)*?)\n\s+(?:for|labels):`).FindAllStringSubmatch(string(raw), -1)
	if n := strings.Count(string(raw), "- alert:"); len(exprs) != n || n == 0 {
		t.Fatalf("%d expressions found in %s, which has %d alerts", len(exprs), path, n)
	}
	metric := regexp.MustCompile(`\bsvc_[a-z0-9_]+\b`)
	for _, e := range exprs {
		found := metric.FindAllString(e[1], -1)
		if len(found) == 0 {
			t.Errorf("rule names no proxy metric: %s", e[1])
		}
		for _, m := range found {
			if !names[m] {
				t.Errorf("rule names %s, which the proxy does not register: %s", m, e[1])
			}
		}
	}
}

// registeredNames are the gathered names and the state gauges, whose
// series exist only with their subject (a budget, a polled subscription
// upstream).
func registeredNames(t *testing.T, g *gateway) map[string]bool {
	names := gatheredNames(t, g)
	descs := make(chan *prometheus.Desc, 16)
	gauges.New(nil, nil, nil, nil).Describe(descs)
	close(descs)
	fqName := regexp.MustCompile(`fqName: "([^"]+)"`)
	for d := range descs {
		names[fqName.FindStringSubmatch(d.String())[1]] = true
	}
	return names
}

func gatheredNames(t *testing.T, g *gateway) map[string]bool {
	t.Helper()
	mfs, err := g.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, mf := range mfs {
		names[mf.GetName()] = true
	}
	return names
}
