package keepalive

import (
	"context"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// A session on an OAuth upstream whose refresh grant the provider refused
// stops at its next refresh without sending the revoked token, counted
// under its own outcome.
func TestRefreshRefusedStopsWithoutSending(t *testing.T) {
	e := setup(t)
	e.turn(t, turn1, endTurn)
	first := e.jobs.last()
	e.svc.Upstream = func(id string) *snapshot.Upstream {
		return &snapshot.Upstream{ID: id, Kind: store.KindVendorOAuth, Enabled: true, CredentialKind: "oauth", Credential: "revoked",
			RefreshRefused: true, MessagesURL: e.upURL + "/v1/messages"}
	}
	e.clk.Set(first.RunAt)
	if out := e.run(t, first); out != scheduler.OutcomeSkip || e.refreshes(OutcomeRefreshRefused) != 1 || e.prov.calls != 0 {
		t.Fatalf("outcome %q, refresh_refused %v, provider calls %d", out, e.refreshes(OutcomeRefreshRefused), e.prov.calls)
	}
	sess, err := e.st.GetKeepAliveSession(context.Background(), sessionOf(t, first))
	if err != nil || sess.State != "stopped" || sess.StopReason != OutcomeRefreshRefused {
		t.Fatalf("session %+v err %v", sess, err)
	}
}
