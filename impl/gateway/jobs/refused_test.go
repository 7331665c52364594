package jobs

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// The metadata refresh asks routable upstreams only: the token of one
// whose refresh grant the provider refused is revoked and never sent; the
// skip is counted under its own status.
func TestMetadataRefreshSkipsRefusedRefreshGrant(t *testing.T) {
	var mu sync.Mutex
	var tokens []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		tokens = append(tokens, r.Header.Get("Authorization")+r.Header.Get("X-Api-Key"))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"data":[{"id":"claude-x","display_name":"X"}]}`))
	}))
	t.Cleanup(srv.Close)
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "m.db"), sqlite.Options{Clock: fakeclock.New(now)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	live, err := st.CreateUpstream(context.Background(), store.UpstreamSpec{Name: "live", Kind: store.KindVendorOAuth, BaseURL: srv.URL, Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	ups := []*snapshot.Upstream{
		{ID: "up_revoked", Kind: store.KindVendorOAuth, BaseURL: srv.URL, Enabled: true, CredentialKind: "oauth", Credential: "revoked-token", RefreshRefused: true},
		{ID: live.ID, Kind: store.KindVendorOAuth, BaseURL: srv.URL, Enabled: true, CredentialKind: "oauth", Credential: "live-token"},
	}
	m := scheduler.NewMetrics(prometheus.NewRegistry())
	d := Deps{Options: service.Options{Clock: fakeclock.New(now)}, Store: st, Metrics: m, HTTP: srv.Client(), Upstreams: func() []*snapshot.Upstream { return ups }}
	out, err := refreshModels(context.Background(), d)
	if err != nil || out != scheduler.OutcomeDone {
		t.Fatalf("outcome %q err %v", out, err)
	}
	if len(tokens) != 1 || tokens[0] != "Bearer live-token" {
		t.Fatalf("credentials sent: %q", tokens)
	}
	if got := testutil.ToFloat64(m.MetadataRefreshStatus.WithLabelValues("refresh_refused")); got != 1 {
		t.Fatalf("refresh_refused count %v", got)
	}
	if got := testutil.ToFloat64(m.MetadataRefreshStatus.WithLabelValues("ok")); got != 1 {
		t.Fatalf("ok count %v", got)
	}
}
