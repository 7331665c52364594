package jobs_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// The metadata refresh sends the upstream's key to its base_url only: an
// upstream answering with a redirect to another origin fails the refresh,
// and nothing reaches that origin, whatever client the job was given.
func TestMetadataRefreshFollowsNoRedirectElsewhere(t *testing.T) {
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	defer other.Close()
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer home.Close()
	up := &snapshot.Upstream{ID: "up_1", BaseURL: home.URL, Enabled: true, CredentialKind: credential.APIKey, Credential: "sk-ant-secret"}
	for name, c := range map[string]*http.Client{"given client": {}, "default client": nil} {
		d := jobs.Deps{HTTP: c, Upstreams: func() []*snapshot.Upstream { return []*snapshot.Upstream{up} }}
		var refresh scheduler.Type
		for _, ty := range jobs.Types(d) {
			if ty.Name == jobs.MetadataRefresh {
				refresh = ty
			}
		}
		_, err := refresh.Handler(context.Background(), scheduler.Job{Type: jobs.MetadataRefresh, Attempt: 1, MaxAttempts: 1})
		if !errors.Is(err, credential.ErrRedirectElsewhere) {
			t.Errorf("%s: refresh error %v, want the refused redirect", name, err)
		}
	}
	if n := reached.Load(); n != 0 {
		t.Fatalf("%d metadata request(s) followed the redirect to another origin", n)
	}
}
