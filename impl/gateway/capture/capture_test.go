package capture_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

func newBox(t testing.TB) *secret.Box {
	t.Helper()
	key := make([]byte, 32)
	rand.Read(key)
	b, err := secret.New(key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A buffer keeps the first limit bytes across writes, reports the cut,
// and never fails a write (the client's bytes flow on unchanged).
func TestBufferCaps(t *testing.T) {
	b := capture.NewBuffer(5)
	for _, p := range []string{"abc", "defg", "hij"} {
		if n, err := b.Write([]byte(p)); n != len(p) || err != nil {
			t.Fatalf("write %q: %d, %v", p, n, err)
		}
	}
	if string(b.Bytes()) != "abcde" || !b.Truncated() {
		t.Fatalf("kept %q truncated %v, want \"abcde\" true", b.Bytes(), b.Truncated())
	}
	exact := capture.NewBuffer(3)
	exact.Write([]byte("abc"))
	if string(exact.Bytes()) != "abc" || exact.Truncated() {
		t.Fatalf("a body of exactly the limit: %q truncated %v", exact.Bytes(), exact.Truncated())
	}
}

// An exchange handed to the sink is stored sealed: the database file does
// not hold the prompt in clear, the master key opens it under its event
// and principal only, and the stored outcome is counted.
func TestSinkStoresSealed(t *testing.T) {
	ctx := context.Background()
	path := filepath.Join(t.TempDir(), "proxy.db")
	st, err := sqlite.Open(ctx, path, sqlite.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	box := newBox(t)
	reg := prometheus.NewRegistry()
	sink := capture.NewSink(st, box, 8, capture.NewMetrics(reg), nil)
	done := make(chan struct{})
	go func() { sink.Run(ctx); close(done) }()
	prompt := `{"messages":[{"role":"user","content":"the-secret-prompt-7f3a"}]}`
	answer := "event: message_delta\ndata: {\"text\":\"the-secret-answer-91bc\"}\n\n"
	at := time.Date(2026, 11, 29, 1, 0, 0, 0, time.UTC)
	sink.Submit(capture.Exchange{EventID: "ev_1", PrincipalID: "pr_1", At: at, Request: []byte(prompt), Response: []byte(answer), Truncated: true})
	sink.Close()
	<-done

	row, err := st.GetCapturedExchange(ctx, "ev_1")
	if err != nil {
		t.Fatal(err)
	}
	if row.PrincipalID != "pr_1" || !row.At.Equal(at) || row.RequestBytes != int64(len(prompt)) || row.ResponseBytes != int64(len(answer)) || !row.Truncated {
		t.Fatalf("stored row %+v", row)
	}
	if bytes.Contains(row.Sealed, []byte("the-secret")) {
		t.Fatal("the sealed column holds the prompt in clear")
	}
	bodies, err := capture.Open(box, *row)
	if err != nil {
		t.Fatal(err)
	}
	if string(bodies.Request) != prompt || string(bodies.Response) != answer || !bodies.Truncated {
		t.Fatalf("opened %+v", bodies)
	}
	moved := *row
	moved.PrincipalID = "pr_2"
	if _, err := capture.Open(box, moved); !errors.Is(err, capture.ErrSealed) {
		t.Fatalf("opened under another principal: %v", err)
	}
	if _, err := capture.Open(newBox(t), *row); !errors.Is(err, capture.ErrSealed) {
		t.Fatalf("opened under another key: %v", err)
	}
	st.Close()
	for _, f := range []string{path, path + "-wal"} {
		raw, err := os.ReadFile(f)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		if strings.Contains(string(raw), "the-secret") {
			t.Fatalf("%s holds a body in clear", filepath.Base(f))
		}
	}
	if n := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeStored); n != 1 {
		t.Fatalf("stored %v, want 1", n)
	}
	if n := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeTruncated); n != 1 {
		t.Fatalf("truncated %v, want 1", n)
	}
}

type failingWriter struct{}

func (failingWriter) InsertCapturedExchanges(context.Context, []store.CapturedExchange) error {
	return errors.New("disk full")
}

// A full queue drops the exchange at once (the request path never waits)
// and counts it; a failed write is counted as failed.
func TestSinkDropsWhenFullAndCountsFailures(t *testing.T) {
	reg := prometheus.NewRegistry()
	sink := capture.NewSink(failingWriter{}, newBox(t), 1, capture.NewMetrics(reg), nil)
	sink.Submit(capture.Exchange{EventID: "ev_1", PrincipalID: "pr_1"})
	sink.Submit(capture.Exchange{EventID: "ev_2", PrincipalID: "pr_1"})
	if n := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeDropped); n != 1 {
		t.Fatalf("dropped %v, want 1", n)
	}
	sink.Close()
	sink.Run(context.Background())
	if n := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeFailed); n != 1 {
		t.Fatalf("failed %v, want 1", n)
	}
	if n := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeStored); n != 0 {
		t.Fatalf("stored %v, want 0", n)
	}
}

type memWriter struct{ batches [][]store.CapturedExchange }

func (m *memWriter) InsertCapturedExchanges(_ context.Context, xs []store.CapturedExchange) error {
	m.batches = append(m.batches, append([]store.CapturedExchange(nil), xs...))
	return nil
}

// Close writes everything queued before it, in transactions of at most
// 64 exchanges, and a Submit after it (a request the drain gave up on)
// neither panics nor blocks.
func TestSinkCloseWritesTheQueueThenIgnoresLateSubmits(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := &memWriter{}
	sink := capture.NewSink(w, newBox(t), 200, capture.NewMetrics(reg), nil)
	for i := range 150 {
		sink.Submit(capture.Exchange{EventID: "ev_" + strings.Repeat("x", i), PrincipalID: "pr_1"})
	}
	sink.Close()
	sink.Close()
	sink.Run(context.Background())
	sink.Submit(capture.Exchange{EventID: "ev_late", PrincipalID: "pr_1"})
	total := 0
	for _, b := range w.batches {
		if len(b) > 64 {
			t.Fatalf("a batch of %d", len(b))
		}
		total += len(b)
	}
	if total != 150 || promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeStored) != 150 {
		t.Fatalf("wrote %d in %d batches, stored %v; want 150", total, len(w.batches), promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeStored))
	}
}

// ctxWriter fails like a database driver when its context has ended.
type ctxWriter struct{ memWriter }

func (c *ctxWriter) InsertCapturedExchanges(ctx context.Context, xs []store.CapturedExchange) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.memWriter.InsertCapturedExchanges(ctx, xs)
}

// A sink stopped by its context (the server's loop list stops it so)
// still writes what was queued, on a context of its own.
func TestSinkStoppedByContextWritesTheQueue(t *testing.T) {
	reg := prometheus.NewRegistry()
	w := &ctxWriter{}
	sink := capture.NewSink(w, newBox(t), 8, capture.NewMetrics(reg), nil)
	for _, id := range []string{"ev_1", "ev_2", "ev_3"} {
		sink.Submit(capture.Exchange{EventID: id, PrincipalID: "pr_1"})
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sink.Run(ctx)
	if n := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeStored); n != 3 || promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeFailed) != 0 {
		t.Fatalf("stored %v, failed %v; want 3 stored", n, promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeFailed))
	}
}
