package snapshot_test

import (
	"context"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// A refused OAuth refresh grant written through one replica takes the
// upstream out of routing on another once it applies the delta, and a new
// credential (the OAuth flow run again) brings it back the same way.
func TestRevokedCredentialOutOfRoutingOnReplica(t *testing.T) {
	bothDrivers(t, func(t *testing.T, driver string) {
		ctx := context.Background()
		r := openReplicas(t, driver)
		u, err := r.a.CreateUpstream(ctx, store.UpstreamSpec{Name: "sub", Kind: store.KindVendorOAuth, BaseURL: "https://api.example", Enabled: true})
		if err != nil {
			t.Fatal(err)
		}
		seal := func(tok string) []byte {
			ct, err := r.box.Seal([]byte(`{"access_token":"`+tok+`"}`), credential.UpstreamAD(u))
			if err != nil {
				t.Fatal(err)
			}
			return ct
		}
		if u, err = r.a.SetUpstreamCredential(ctx, u.ID, credential.OAuth, seal("tok-1")); err != nil {
			t.Fatal(err)
		}
		if err := r.rt.Refresh(ctx); err != nil {
			t.Fatal(err)
		}
		if up := r.rt.Current().Upstream(u.ID); up == nil || !up.Routable() {
			t.Fatalf("a connected upstream is not routable: %+v", up)
		}
		if ok, err := r.a.RecordRefreshFailure(ctx, u.ID, u.CredentialVersion, "refused (invalid_grant)", true, r.clk.Now()); err != nil || !ok {
			t.Fatalf("record refusal: %v %v", ok, err)
		}
		r.refreshDelta(t)
		if up := r.rt.Current().Upstream(u.ID); up == nil || up.Routable() || !up.RefreshRefused {
			t.Fatalf("a revoked upstream is still routable after the delta: %+v", up)
		}
		if _, err := r.a.SetUpstreamCredential(ctx, u.ID, credential.OAuth, seal("tok-2")); err != nil {
			t.Fatal(err)
		}
		r.refreshDelta(t)
		if up := r.rt.Current().Upstream(u.ID); up == nil || !up.Routable() || up.Credential != "tok-2" {
			t.Fatalf("a new credential did not bring the upstream back: %+v", up)
		}
	})
}
