package quota

import (
	"context"
	"errors"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
)

// After the provider refused the refresh grant, the revoked token is sent
// neither by the sweep's polls nor by a poll already queued nor by a
// coupon claim; the claim names the reason.
func TestRefreshRefusedSendsNothing(t *testing.T) {
	e := setup(t)
	if ok, err := e.svc.Poll(context.Background(), e.up.ID); err != nil || !ok {
		t.Fatal(ok, err)
	}
	before := len(e.prov.usageCalls)
	if ok, err := e.st.RecordRefreshFailure(context.Background(), e.up.ID, e.up.CredentialVersion, "refused: invalid_grant", true, e.clk.Now()); err != nil || !ok {
		t.Fatalf("record refusal: %v %v", ok, err)
	}
	if out, err := e.svc.sweep(context.Background(), scheduler.Job{IdempotencyKey: "tick"}); err != nil || out != scheduler.OutcomeNoop || len(e.jobs.keys) != 0 {
		t.Fatalf("sweep %q %v queued %v", out, err, e.jobs.keys)
	}
	p := []byte(`{"upstream_id":"` + e.up.ID + `"}`)
	if out, err := e.svc.pollOne(context.Background(), scheduler.Job{Type: PollOneJob, Payload: p}); err != nil || out != scheduler.OutcomeNoop {
		t.Fatalf("queued poll: %q %v", out, err)
	}
	if v := e.view(t); v.Usable {
		t.Fatal("a coupon is advertised for a revoked credential")
	}
	if _, err := e.svc.Claim(context.Background(), e.up.ID); !errors.Is(err, oauth.ErrRefreshRefused) {
		t.Fatalf("claim: %v", err)
	}
	if len(e.prov.usageCalls) != before || e.prov.profiles.Load() != 1 || e.prov.claims.Load() != 0 {
		t.Fatalf("provider asked after the refusal: usage %d (was %d), profiles %d, claims %d",
			len(e.prov.usageCalls), before, e.prov.profiles.Load(), e.prov.claims.Load())
	}
}
