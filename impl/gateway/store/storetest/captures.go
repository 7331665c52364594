package storetest

import (
	"bytes"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseCaptures(t *testing.T, open Opener) {
	t.Run("CapturedExchangeRoundTrip", func(t *testing.T) { run(t, open, testCaptureRoundTrip) })
	t.Run("CapturedExchangeReadIsAudited", func(t *testing.T) { run(t, open, testCaptureReadAudited) })
	t.Run("CapturedExchangePrune", func(t *testing.T) { run(t, open, testCapturePrune) })
}

func capturedExchange(id string, at time.Time) store.CapturedExchange {
	return store.CapturedExchange{EventID: id, PrincipalID: "pr_c", At: at, RequestBytes: 12, ResponseBytes: 34,
		Truncated: true, Sealed: []byte("ct-" + id + "\x00\xff")}
}

// A captured exchange comes back as written, byte for byte; writing an
// event's exchange again keeps the first (a retried flush duplicates
// nothing); the listing marker reports exactly the captured ids.
func testCaptureRoundTrip(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	must(0, b.st.InsertCapturedExchanges(b.ctx, []store.CapturedExchange{capturedExchange("ev_1", now), capturedExchange("ev_2", now)}))
	again := capturedExchange("ev_1", now)
	again.Sealed = []byte("other")
	must(0, b.st.InsertCapturedExchanges(b.ctx, []store.CapturedExchange{again}))
	got := must(b.st.GetCapturedExchange(b.ctx, "ev_1"))
	want := capturedExchange("ev_1", now)
	if got.EventID != want.EventID || got.PrincipalID != want.PrincipalID || !got.At.Equal(want.At) || got.RequestBytes != 12 ||
		got.ResponseBytes != 34 || !got.Truncated || !bytes.Equal(got.Sealed, want.Sealed) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	_, err := b.st.GetCapturedExchange(b.ctx, "ev_none")
	wantErr(t, err, store.ErrNotFound)
	ids := must(b.st.CapturedEventIDs(b.ctx, []string{"ev_2", "ev_none", "ev_1"}))
	if len(ids) != 2 || !ids["ev_1"] || !ids["ev_2"] {
		t.Fatalf("captured ids %v", ids)
	}
	if ids := must(b.st.CapturedEventIDs(b.ctx, nil)); len(ids) != 0 {
		t.Fatalf("captured ids of none %v", ids)
	}
}

// Retention: pruning drops the exchanges captured before the cut only.
func testCapturePrune(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	must(0, b.st.InsertCapturedExchanges(b.ctx, []store.CapturedExchange{
		capturedExchange("ev_old", now.Add(-2*time.Hour)), capturedExchange("ev_new", now)}))
	if n := must(b.st.Prune(b.ctx, "captured_exchanges", now.Add(-time.Hour))); n != 1 {
		t.Fatalf("pruned %d, want 1", n)
	}
	_, err := b.st.GetCapturedExchange(b.ctx, "ev_old")
	wantErr(t, err, store.ErrNotFound)
	must(b.st.GetCapturedExchange(b.ctx, "ev_new"))
}

// Reading an exchange's bodies leaves an audit row naming the reader and
// the event; asking for an exchange that was not captured leaves none.
func testCaptureReadAudited(t *testing.T, open Opener) {
	b := setup(t, open)
	must(0, b.st.InsertCapturedExchanges(b.ctx, []store.CapturedExchange{capturedExchange("ev_1", b.clk.Now())}))
	ctx := store.WithActor(b.ctx, "carol")
	if x := must(b.st.ReadCapturedExchange(ctx, "ev_1")); !bytes.Equal(x.Sealed, capturedExchange("ev_1", time.Time{}).Sealed) {
		t.Fatalf("read %+v", x)
	}
	_, err := b.st.ReadCapturedExchange(ctx, "ev_none")
	wantErr(t, err, store.ErrNotFound)
	es := must(b.st.ListAudit(b.ctx, time.Time{}, 10))
	if len(es) != 1 || es[0].Actor != "carol" || es[0].Action != "read" || es[0].ResourceKind != "captured_exchange" || es[0].ResourceID != "ev_1" {
		t.Fatalf("audit %+v", es)
	}
}
