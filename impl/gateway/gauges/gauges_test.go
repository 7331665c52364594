package gauges_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/gauges"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// opener "decrypts" by checking the associated data is embedded; "bad"
// stands in for a credential the master key cannot open.
type opener struct{}

func (opener) Open(ct, ad []byte) ([]byte, error) {
	if len(ct) < len(ad) || string(ct[:len(ad)]) != string(ad) {
		return nil, errors.New("bad binding")
	}
	return ct[len(ad):], nil
}

func sealed(id, kind, base, pt string) []byte {
	return append(credential.AD(id, kind, base, ""), pt...)
}

type snaps struct{ s *snapshot.Snapshot }

func (s snaps) Current() *snapshot.Snapshot { return s.s }

type fakeStore struct {
	gen    int64
	genErr error
	quotas map[string]*store.QuotaObservation
}

func (f *fakeStore) ConfigGeneration(context.Context) (int64, error) { return f.gen, f.genErr }
func (f *fakeStore) GetQuota(_ context.Context, id string) (*store.QuotaObservation, error) {
	if q, ok := f.quotas[id]; ok {
		return q, nil
	}
	return nil, store.ErrNotFound
}

type budgets map[string]float64

func (b budgets) BudgetUsed(principal string, _ []limits.Limit) (float64, bool) {
	r, ok := b[principal]
	return r, ok
}

var resets = time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)

func build() *snapshot.Snapshot {
	return snapshot.Build(&store.Config{
		Generation: 41,
		Upstreams: []store.Upstream{
			{ID: "up_1", Name: "team-key", Kind: store.KindVendorAPIKey, BaseURL: "http://a", Enabled: true, Credential: sealed("up_1", store.KindVendorAPIKey, "http://a", "sk"), CredentialKind: credential.APIKey},
			{ID: "up_2", Name: "max-a", Kind: store.KindVendorOAuth, BaseURL: "http://b", Enabled: true, Credential: sealed("up_2", store.KindVendorOAuth, "http://b", `{"access_token":"at"}`), CredentialKind: credential.OAuth},
			{ID: "up_3", Name: "max-revoked", Kind: store.KindVendorOAuth, BaseURL: "http://c", Enabled: true, Credential: sealed("up_3", store.KindVendorOAuth, "http://c", `{"access_token":"at"}`), CredentialKind: credential.OAuth,
				Status: store.UpstreamStatus{RefreshRefused: true}},
			{ID: "up_4", Name: "rekeyed", Kind: store.KindVendorAPIKey, BaseURL: "http://d", Enabled: true, Credential: []byte("sealed under another key"), CredentialKind: credential.APIKey},
			{ID: "up_5", Name: "empty", Kind: store.KindVendorOAuth, BaseURL: "http://e", Enabled: true},
			{ID: "up_6", Name: "off", Kind: store.KindVendorAPIKey, BaseURL: "http://f", Enabled: false},
		},
		Principals: []store.Principal{
			{ID: "pr_1", Name: "alice", Enabled: true, DefaultLimits: []byte(`[{"kind":"usd","window_secs":86400,"limit":"5.00"}]`)},
			{ID: "pr_2", Name: "bob", Enabled: true},
			{ID: "pr_3", Name: "carol", Enabled: false, DefaultLimits: []byte(`[{"kind":"usd","window_secs":86400,"limit":"5.00"}]`)},
		},
	}, opener{}, time.Now())
}

// Each enabled upstream has one credential state set, named by upstream
// name: usable, refused by the provider, or missing (none, or one the master
// key cannot open); a disabled upstream has none. Budgets are reported by
// principal name for enabled principals with a budget; the snapshot's and
// the stored generations side by side; the polled windows of subscription
// upstreams as ratios with their reset times.
func TestCollectorReportsStateByName(t *testing.T) {
	st := &fakeStore{gen: 43, quotas: map[string]*store.QuotaObservation{
		"up_2": {UpstreamID: "up_2", FiveHour: store.QuotaWindow{Utilization: 40, ResetsAt: &resets},
			SevenDay: store.QuotaWindow{Utilization: 92.5, ResetsAt: &resets}},
		// An observation with no active window exports nothing for it.
		"up_3": {UpstreamID: "up_3"},
	}}
	c := gauges.New(snaps{build()}, st, budgets{"pr_1": 0.85, "pr_3": 1}, nil)
	want := `
# HELP svc_config_generation_snapshot Configuration generation this replica serves.
# TYPE svc_config_generation_snapshot gauge
svc_config_generation_snapshot 41
# HELP svc_config_generation_stored Configuration generation stored in the database, read at the scrape.
# TYPE svc_config_generation_stored gauge
svc_config_generation_stored 43
# HELP svc_principal_budget_used_ratio Share of the fullest of an enabled principal's budgets spent in its sliding window (1: requests are refused).
# TYPE svc_principal_budget_used_ratio gauge
svc_principal_budget_used_ratio{principal="alice"} 0.85
# HELP svc_upstream_credential_state 1 for the state of each enabled upstream's credential (ok, refused, missing), 0 for the others.
# TYPE svc_upstream_credential_state gauge
svc_upstream_credential_state{state="missing",upstream="empty"} 1
svc_upstream_credential_state{state="missing",upstream="max-a"} 0
svc_upstream_credential_state{state="missing",upstream="max-revoked"} 0
svc_upstream_credential_state{state="missing",upstream="rekeyed"} 1
svc_upstream_credential_state{state="missing",upstream="team-key"} 0
svc_upstream_credential_state{state="ok",upstream="empty"} 0
svc_upstream_credential_state{state="ok",upstream="max-a"} 1
svc_upstream_credential_state{state="ok",upstream="max-revoked"} 0
svc_upstream_credential_state{state="ok",upstream="rekeyed"} 0
svc_upstream_credential_state{state="ok",upstream="team-key"} 1
svc_upstream_credential_state{state="refused",upstream="empty"} 0
svc_upstream_credential_state{state="refused",upstream="max-a"} 0
svc_upstream_credential_state{state="refused",upstream="max-revoked"} 1
svc_upstream_credential_state{state="refused",upstream="rekeyed"} 0
svc_upstream_credential_state{state="refused",upstream="team-key"} 0
# HELP svc_upstream_quota_resets_at_seconds Unix time the usage window of the last usage poll resets.
# TYPE svc_upstream_quota_resets_at_seconds gauge
svc_upstream_quota_resets_at_seconds{upstream="max-a",window="five_hour"} 1.7960832e+09
svc_upstream_quota_resets_at_seconds{upstream="max-a",window="seven_day"} 1.7960832e+09
# HELP svc_upstream_quota_utilization_ratio Utilisation of a subscription upstream's usage window at the last usage poll (1: used up).
# TYPE svc_upstream_quota_utilization_ratio gauge
svc_upstream_quota_utilization_ratio{upstream="max-a",window="five_hour"} 0.4
svc_upstream_quota_utilization_ratio{upstream="max-a",window="seven_day"} 0.925
`
	if err := testutil.CollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(c)
	problems, err := testutil.GatherAndLint(reg)
	if err != nil || len(problems) > 0 {
		t.Fatalf("lint: %v %v", problems, err)
	}
}

// A database that cannot be read costs the stored generation and the
// windows, never the scrape or the in-memory gauges.
func TestCollectorWithoutDatabase(t *testing.T) {
	st := &fakeStore{genErr: errors.New("connection refused")}
	c := gauges.New(snaps{build()}, st, nil, nil)
	n, err := testutil.GatherAndCount(func() *prometheus.Registry { r := prometheus.NewRegistry(); r.MustRegister(c); return r }())
	if err != nil {
		t.Fatal(err)
	}
	if n != 1+5*3 {
		t.Fatalf("%d series, want the snapshot generation and 5 upstreams × 3 states", n)
	}
	if got := testutil.ToFloat64(onlyGeneration{c}); got != 41 {
		t.Fatalf("snapshot generation %v", got)
	}
}

// onlyGeneration narrows the collector to its snapshot generation.
type onlyGeneration struct{ c *gauges.Collector }

func (o onlyGeneration) Describe(ch chan<- *prometheus.Desc) { o.c.Describe(ch) }
func (o onlyGeneration) Collect(ch chan<- prometheus.Metric) {
	all := make(chan prometheus.Metric, 64)
	o.c.Collect(all)
	close(all)
	for m := range all {
		if strings.Contains(m.Desc().String(), "svc_config_generation_snapshot") {
			ch <- m
		}
	}
}
