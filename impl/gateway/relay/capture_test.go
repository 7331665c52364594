package relay

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// memCapturer keeps what the relay submits.
type memCapturer struct {
	mu sync.Mutex
	xs []capture.Exchange
}

func (m *memCapturer) Submit(x capture.Exchange) {
	m.mu.Lock()
	m.xs = append(m.xs, x)
	m.mu.Unlock()
}

// captureFixture is fixture with pr_a capturing when on.
func captureFixture(on bool) *snapshot.Snapshot {
	cfg := fixtureConfig(apiKeyUpstream("up_1", "http://upstream.invalid", "sk-upstream"))
	cfg.Principals[0].CaptureExchanges = on
	return snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))
}

const cannedAnswer = `{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`

// serve runs one request through h in the test's goroutine: when it
// returns, the handler and its deferred hand-overs are done.
func serve(h *Handler, path, key, body string) *httptest.ResponseRecorder {
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("x-api-key", key)
	req.Header.Set("Authorization", "Bearer "+key)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

// A captured principal's exchange holds the body as the client sent it
// and the bytes the client got (JSON answer, SSE stream, and an OpenAI
// Chat Completions answer in OpenAI's shape), under the id of the
// request event recorded for it.
func TestCaptureHoldsBodiesAsSentUnderTheEventID(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path string
		transport  http.RoundTripper
		body       string
	}{
		{"json", "/v1/messages", cannedTransport{[]byte(cannedAnswer)}, `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"secret prompt"}]}`},
		{"stream", "/v1/messages", streamTransport{benchEvents()}, `{"model":"claude-test","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"secret prompt"}]}`},
		{"chat", "/v1/chat/completions", cannedTransport{[]byte(cannedAnswer)}, `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"secret prompt"}]}`},
		{"chat stream", "/v1/chat/completions", streamTransport{benchEvents()}, `{"model":"claude-test","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"secret prompt"}]}`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec, cap := &memRecorder{}, &memCapturer{}
			h := New(Options{Source: fakeSource{captureFixture(true)}, Transport: c.transport, Recorder: rec, Capture: cap})
			w := serve(h, c.path, "sk-good", c.body)
			if w.Code != 200 {
				t.Fatalf("status %d: %s", w.Code, w.Body)
			}
			evs := rec.events()
			if len(evs) != 1 || len(cap.xs) != 1 {
				t.Fatalf("%d events, %d exchanges", len(evs), len(cap.xs))
			}
			x := cap.xs[0]
			if x.EventID == "" || x.EventID != evs[0].ID || x.PrincipalID != "pr_a" || x.Truncated {
				t.Fatalf("exchange %s of %s (truncated %v), event %q", x.EventID, x.PrincipalID, x.Truncated, evs[0].ID)
			}
			if string(x.Request) != c.body {
				t.Fatalf("request captured %q, sent %q", x.Request, c.body)
			}
			if !bytes.Equal(x.Response, w.Body.Bytes()) || w.Body.Len() == 0 {
				t.Fatalf("response captured %q, client got %q", x.Response, w.Body.Bytes())
			}
		})
	}
}

// A principal without capture has nothing submitted, and its event keeps
// the id the store gives it.
func TestCaptureOffSubmitsNothing(t *testing.T) {
	t.Parallel()
	rec, cap := &memRecorder{}, &memCapturer{}
	h := New(Options{Source: fakeSource{captureFixture(false)}, Transport: cannedTransport{[]byte(cannedAnswer)}, Recorder: rec, Capture: cap})
	if w := serve(h, "/v1/messages", "sk-good", `{"model":"claude-test","max_tokens":5,"messages":[]}`); w.Code != 200 {
		t.Fatalf("status %d", w.Code)
	}
	if evs := rec.events(); len(evs) != 1 || evs[0].ID != "" || len(cap.xs) != 0 {
		t.Fatalf("events %+v, exchanges %d", evs, len(cap.xs))
	}
}

// Bodies past the cap are cut in the exchange, never in the client's
// answer; the exchange says so and svc_proxy_captures_total counts it
// truncated besides stored.
func TestCaptureCapTruncates(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := capture.NewMetrics(reg)
	box, err := secret.New(bytes.Repeat([]byte{7}, secret.KeySize))
	if err != nil {
		t.Fatal(err)
	}
	rows := &memRows{}
	sink := capture.NewSink(rows, box, 8, m, nil)
	const limit = 32
	h := New(Options{Source: fakeSource{captureFixture(true)}, Transport: cannedTransport{[]byte(cannedAnswer)},
		Recorder: &memRecorder{}, Capture: sink, CaptureLimit: limit})
	body := `{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"a prompt longer than the cap"}]}`
	w := serve(h, "/v1/messages", "sk-good", body)
	if w.Code != 200 || w.Body.String() != cannedAnswer {
		t.Fatalf("client got %d %q, want the whole answer", w.Code, w.Body)
	}
	sink.Close()
	sink.Run(context.Background())
	if len(rows.xs) != 1 || !rows.xs[0].Truncated || rows.xs[0].RequestBytes != limit || rows.xs[0].ResponseBytes != limit {
		t.Fatalf("stored %+v", rows.xs)
	}
	b, err := capture.Open(box, rows.xs[0])
	if err != nil {
		t.Fatal(err)
	}
	if string(b.Request) != body[:limit] || string(b.Response) != cannedAnswer[:limit] || !b.Truncated {
		t.Fatalf("opened %q / %q (truncated %v)", b.Request, b.Response, b.Truncated)
	}
	for outcome, want := range map[string]float64{capture.OutcomeStored: 1, capture.OutcomeTruncated: 1, capture.OutcomeDropped: 0, capture.OutcomeFailed: 0} {
		if got := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", outcome); got != want {
			t.Errorf("svc_proxy_captures_total{outcome=%q} = %v, want %v", outcome, got, want)
		}
	}
}

// A full sink drops the exchange and counts it; the client's answer is
// unchanged and not delayed by it (Submit never blocks: the sink's
// worker is not even running here).
func TestCaptureDropsWhenSinkFull(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	box, _ := secret.New(bytes.Repeat([]byte{7}, secret.KeySize))
	sink := capture.NewSink(&memRows{}, box, 1, capture.NewMetrics(reg), nil)
	h := New(Options{Source: fakeSource{captureFixture(true)}, Transport: cannedTransport{[]byte(cannedAnswer)}, Recorder: &memRecorder{}, Capture: sink})
	for range 3 {
		if w := serve(h, "/v1/messages", "sk-good", `{"model":"claude-test","max_tokens":5,"messages":[]}`); w.Code != 200 || w.Body.String() != cannedAnswer {
			t.Fatalf("client got %d %q", w.Code, w.Body)
		}
	}
	if got := promtest.Value(t, reg, "svc_proxy_captures_total", "outcome", capture.OutcomeDropped); got != 2 {
		t.Fatalf("dropped %v, want 2", got)
	}
}

type memRows struct{ xs []store.CapturedExchange }

func (m *memRows) InsertCapturedExchanges(_ context.Context, xs []store.CapturedExchange) error {
	m.xs = append(m.xs, xs...)
	return nil
}

// A principal without capture costs no allocation for it: the same
// request allocates as often with a sink wired as without one.
func TestCaptureOffAllocatesNothing(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items")
	}
	allocs := func(c Capturer) float64 {
		var h *Handler
		if c == nil {
			h = New(Options{Source: fakeSource{captureFixture(false)}, Transport: cannedTransport{[]byte(cannedAnswer)}, Recorder: discardRecorder{}})
		} else {
			h = New(Options{Source: fakeSource{captureFixture(false)}, Transport: cannedTransport{[]byte(cannedAnswer)}, Recorder: discardRecorder{}, Capture: c})
		}
		body := `{"model":"claude-test","max_tokens":5,"messages":[]}`
		serve(h, "/v1/messages", "sk-good", body) // warm the pools
		return testing.AllocsPerRun(200, func() { serve(h, "/v1/messages", "sk-good", body) })
	}
	without, with := allocs(nil), allocs(&memCapturer{})
	if with != without {
		t.Fatalf("%v allocations per request with a sink wired, %v without", with, without)
	}
}

// discardCapturer drops what the relay submits.
type discardCapturer struct{}

func (discardCapturer) Submit(capture.Exchange) {}

// BenchmarkRelayCaptured is BenchmarkRelay for a principal with capture
// on: the difference is what capturing costs the request path (the
// sealing and writing are the sink's, BenchmarkSeal in package capture).
func BenchmarkRelayCaptured(b *testing.B) {
	benchRequests(b, New(Options{
		Source:    fakeSource{captureFixture(true)},
		Transport: cannedTransport{[]byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)},
		Recorder:  discardRecorder{},
		Capture:   discardCapturer{},
		// As benchHandler wires them.
		Board:     routing.NewBoard(nil),
		Affinity:  affinity.NewTable(),
		Admission: admission.New(admission.Options{}),
	}))
}
