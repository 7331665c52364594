package warmup

import (
	"context"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
)

// refuse records the provider's refusal of the current credential's
// refresh grant, as the OAuth refresh does on invalid_grant.
func (e *env) refuse(t *testing.T) {
	t.Helper()
	if ok, err := e.st.RecordRefreshFailure(context.Background(), e.up.ID, e.up.CredentialVersion, "refused: invalid_grant", true, e.clk.Now()); err != nil || !ok {
		t.Fatalf("record refusal: %v %v", ok, err)
	}
}

// A credential whose refresh grant the provider refused is revoked: no
// attempt sends it, the skip is logged with its reason, and the watchdog
// queues nothing for it.
func TestRefreshRefusedIsNeverWarmed(t *testing.T) {
	e := setup(t)
	e.connect(t)
	e.refuse(t)
	out, err := e.run(t)
	if err != nil || out != scheduler.OutcomeNoop || e.prov.count() != 0 {
		t.Fatalf("outcome %q err %v, %d provider requests", out, err, e.prov.count())
	}
	ev := e.events(t)
	if len(ev) != 1 || ev[0]["action"] != "attempt_skipped" || ev[0]["outcome"] != OutcomeRefreshRefused {
		t.Fatalf("events %v", ev)
	}
	if out, _ := e.w.watchdog(context.Background(), scheduler.Job{}); out != scheduler.OutcomeNoop || len(e.jobs.enqueued) != 0 {
		t.Fatalf("watchdog %q queued %+v", out, e.jobs.enqueued)
	}
	// The flow run again (a new credential) clears the refusal.
	e.connect(t)
	if out, err := e.run(t); err != nil || out != scheduler.OutcomeDone || e.prov.count() != 1 {
		t.Fatalf("after a new flow: outcome %q err %v, %d provider requests", out, err, e.prov.count())
	}
}
