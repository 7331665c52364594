package relay

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// holder is a simulated upstream that holds every request until the test
// lets it go, counting how many it holds at once and the order requests
// arrived in (by their max_tokens, which the tests use as a number).
type holder struct {
	srv              *httptest.Server
	held, most, hits atomic.Int32
	mu               sync.Mutex
	order            []int
	release          chan struct{} // a token lets one held request go
	once             sync.Once
	all              chan struct{} // closed: every request goes
}

func holding(t *testing.T) *holder {
	t.Helper()
	h := &holder{release: make(chan struct{}), all: make(chan struct{})}
	h.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body struct {
			MaxTokens int `json:"max_tokens"`
		}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &body)
		h.mu.Lock()
		h.order = append(h.order, body.MaxTokens)
		h.mu.Unlock()
		c := h.held.Add(1)
		for {
			m := h.most.Load()
			if c <= m || h.most.CompareAndSwap(m, c) {
				break
			}
		}
		h.hits.Add(1)
		select {
		case <-h.release:
		case <-h.all:
		}
		h.held.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`))
	}))
	t.Cleanup(h.srv.Close)
	t.Cleanup(h.letAll) // runs first: the server's Close waits for its handlers
	return h
}

func (h *holder) letAll() { h.once.Do(func() { close(h.all) }) }

func (h *holder) arrived() []int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]int(nil), h.order...)
}

// until yields until cond holds.
func until(cond func() bool) {
	for !cond() {
		runtime.Gosched()
	}
}

func cappedUpstream(id, url string, cap int) store.Upstream {
	u := apiKeyUpstream(id, url, "sk-upstream")
	u.MaxInFlight = cap
	return u
}

// capHandler serves ups through the built-in router with the upstreams'
// caps enforced by caps; the spreading's draw always picks the first
// upstream, so the plan is the configured order.
func capHandler(t *testing.T, caps *admission.Controller, o Options, ups ...store.Upstream) (string, *Handler, *Metrics) {
	t.Helper()
	cfg := fixtureConfig(ups...)
	m := NewMetrics(prometheus.NewRegistry())
	o.Source, o.UpstreamCaps, o.Metrics = fakeSource{snapshot.Build(cfg, plainOpener{}, cfg.Principals[0].CreatedAt)}, caps, m
	h := New(o)
	h.randN = func(uint64) uint64 { return 0 }
	px := httptest.NewServer(h)
	t.Cleanup(px.Close)
	return px.URL, h, m
}

func sendNumbered(t *testing.T, url string, n int, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	all := map[string]string{"x-api-key": "sk-good"}
	for k, v := range hdr {
		all[k] = v
	}
	return post(t, url+"/v1/messages", all, `{"model":"claude-test","max_tokens":`+strconv.Itoa(n)+`}`)
}

// A burst against an upstream of max_in_flight 2 never has more than 2 at
// that upstream: the rest spill to the next upstream of the plan, served
// at once, not queued (docs/routing.md, "Concurrency caps and the queue").
func TestUpstreamCapSpillsABurstToTheNextUpstream(t *testing.T) {
	t.Parallel()
	a, b := holding(t), holding(t)
	caps := admission.New(admission.Options{Subject: "upstream"})
	url, _, m := capHandler(t, caps, Options{}, cappedUpstream("up_a", a.srv.URL, 2), apiKeyUpstream("up_b", b.srv.URL, "sk-upstream"))
	t.Cleanup(func() { a.letAll(); b.letAll() }) // before the proxy closes, on failure
	const n = 6
	statuses := make([]int, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := sendNumbered(t, url, i+1, nil)
			statuses[i] = resp.StatusCode
		}()
	}
	until(func() bool { return a.held.Load()+b.held.Load() == n })
	if in, q := caps.State("up_a"); in != 2 || q != 0 {
		t.Fatalf("up_a: %d in flight, %d queued; want 2 and 0", in, q)
	}
	a.letAll()
	b.letAll()
	wg.Wait()
	for i, st := range statuses {
		if st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
	}
	if a.most.Load() != 2 || a.hits.Load() != 2 || b.hits.Load() != n-2 {
		t.Fatalf("up_a held at most %d (%d requests), up_b %d requests; want 2, 2, %d", a.most.Load(), a.hits.Load(), b.hits.Load(), n-2)
	}
	if s, q := testutil.ToFloat64(m.upstreamCap[capSpilled]), testutil.ToFloat64(m.upstreamCap[capQueued]); s != n-2 || q != 0 {
		t.Fatalf("spilled %v, queued %v", s, q)
	}
	if in, q := caps.State("up_a"); in != 0 || q != 0 {
		t.Fatalf("slots not given back: %d in flight, %d queued", in, q)
	}
}

// When every planned upstream is at its cap the requests wait in the first
// one's queue and are sent to it in arrival order as its slot frees;
// nothing is sent past a cap and nobody is refused.
func TestUpstreamsAllAtCapQueueInArrivalOrder(t *testing.T) {
	t.Parallel()
	a, b := holding(t), holding(t)
	caps := admission.New(admission.Options{Subject: "upstream"})
	url, _, m := capHandler(t, caps, Options{}, cappedUpstream("up_a", a.srv.URL, 1), cappedUpstream("up_b", b.srv.URL, 1))
	t.Cleanup(func() { a.letAll(); b.letAll() })
	statuses := make(chan int, 5)
	go1 := func(n int) {
		go func() {
			resp, _ := sendNumbered(t, url, n, nil)
			statuses <- resp.StatusCode
		}()
	}
	go1(1)
	until(func() bool { return a.hits.Load() == 1 })
	go1(2)
	until(func() bool { return b.hits.Load() == 1 })
	for n := 3; n <= 5; n++ {
		go1(n)
		until(func() bool { _, q := caps.State("up_a"); return q == n-2 })
	}
	for served := 2; served <= 4; served++ {
		a.release <- struct{}{} // one request of up_a ends: the next in line takes its slot
		until(func() bool { return a.hits.Load() == int32(served) })
	}
	a.letAll()
	b.letAll()
	for range 5 {
		if st := <-statuses; st != 200 {
			t.Fatalf("status %d", st)
		}
	}
	if got := a.arrived(); len(got) != 4 || got[0] != 1 || got[1] != 3 || got[2] != 4 || got[3] != 5 {
		t.Fatalf("up_a served %v, want [1 3 4 5]", got)
	}
	if a.most.Load() != 1 || b.most.Load() != 1 || b.hits.Load() != 1 {
		t.Fatalf("held at once: up_a %d, up_b %d (up_b %d requests)", a.most.Load(), b.most.Load(), b.hits.Load())
	}
	if q, r := testutil.ToFloat64(m.upstreamCap[capQueued]), testutil.ToFloat64(m.upstreamCap[capRefused]); q != 3 || r != 0 {
		t.Fatalf("queued %v refused %v", q, r)
	}
}

// A wait for an upstream's slot that runs out is answered 429
// rate_limit_error with a retry-after, and the request is never sent; a
// full queue is answered so at once.
func TestUpstreamCapWaitRunsOutWith429(t *testing.T) {
	t.Parallel()
	t.Run("wait", func(t *testing.T) {
		t.Parallel()
		a := holding(t)
		clk := fakeclock.New(time.Time{})
		caps := admission.New(admission.Options{Subject: "upstream", Clock: clk})
		url, _, m := capHandler(t, caps, Options{}, cappedUpstream("up_a", a.srv.URL, 1))
		t.Cleanup(a.letAll)
		first := make(chan int, 1)
		go func() {
			resp, _ := sendNumbered(t, url, 1, nil)
			first <- resp.StatusCode
		}()
		until(func() bool { return a.hits.Load() == 1 })
		got := make(chan *http.Response, 1)
		var body string
		go func() {
			var resp *http.Response
			resp, body = sendNumbered(t, url, 2, nil)
			got <- resp
		}()
		// Only the queued request arms a timer on clk: once armed, its
		// wait is run out.
		<-clk.Armed()
		clk.Advance(admission.DefaultMaxWait)
		resp := <-got
		if resp.StatusCode != 429 || !strings.Contains(body, `"type":"rate_limit_error"`) || !strings.Contains(body, "the queue wait ran out") {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err != nil || s < 1 {
			t.Fatalf("retry-after %q", resp.Header.Get("Retry-After"))
		}
		if a.hits.Load() != 1 {
			t.Fatalf("the refused request reached the upstream (%d requests)", a.hits.Load())
		}
		if r := testutil.ToFloat64(m.upstreamCap[capRefused]); r != 1 {
			t.Fatalf("refused %v", r)
		}
		a.letAll()
		if st := <-first; st != 200 {
			t.Fatalf("first request %d", st)
		}
	})
	t.Run("full", func(t *testing.T) {
		t.Parallel()
		a := holding(t)
		caps := admission.New(admission.Options{Subject: "upstream", QueueLength: -1})
		url, _, _ := capHandler(t, caps, Options{}, cappedUpstream("up_a", a.srv.URL, 1))
		t.Cleanup(a.letAll)
		first := make(chan int, 1)
		go func() {
			resp, _ := sendNumbered(t, url, 1, nil)
			first <- resp.StatusCode
		}()
		until(func() bool { return a.hits.Load() == 1 })
		resp, body := sendNumbered(t, url, 2, nil)
		if resp.StatusCode != 429 || !strings.Contains(body, "its queue is full") || resp.Header.Get("Retry-After") == "" {
			t.Fatalf("%d %s %q", resp.StatusCode, body, resp.Header.Get("Retry-After"))
		}
		a.letAll()
		if st := <-first; st != 200 || a.hits.Load() != 1 {
			t.Fatalf("first request %d, upstream saw %d", st, a.hits.Load())
		}
	})
}

// A session spilled past its upstream at its cap is served elsewhere but
// not moved: its next request goes back to its own upstream.
func TestUpstreamCapDoesNotMoveASession(t *testing.T) {
	t.Parallel()
	a, b := holding(t), holding(t)
	caps := admission.New(admission.Options{Subject: "upstream"})
	sessions := affinity.NewTable()
	const sid = "0b5c4a2e-5d0e-4f55-9a51-6f7ad3c2a111"
	key := affinity.HeaderKey("pr_a", sid)
	// The capped upstream is the session's own (its rendezvous choice).
	ids := [2]string{"up_a", "up_b"}
	if affinity.Score(key, "up_b", 1) > affinity.Score(key, "up_a", 1) {
		ids = [2]string{"up_b", "up_a"}
	}
	url, _, _ := capHandler(t, caps, Options{Affinity: sessions},
		cappedUpstream(ids[0], a.srv.URL, 1), apiKeyUpstream(ids[1], b.srv.URL, "sk-upstream"))
	t.Cleanup(func() { a.letAll(); b.letAll() })
	hdr := map[string]string{affinity.SessionHeader: sid}
	first := make(chan int, 1)
	go func() {
		resp, _ := sendNumbered(t, url, 1, hdr)
		first <- resp.StatusCode
	}()
	until(func() bool { return a.hits.Load() == 1 })
	second := make(chan int, 1)
	go func() {
		resp, _ := sendNumbered(t, url, 2, hdr)
		second <- resp.StatusCode
	}()
	until(func() bool { return b.hits.Load() == 1 }) // spilled
	b.letAll()
	if st := <-second; st != 200 {
		t.Fatalf("spilled request %d", st)
	}
	if to, moved := sessions.Moved(key); moved {
		t.Fatalf("the session was moved to %s for a momentary cap", to)
	}
	a.letAll()
	if st := <-first; st != 200 {
		t.Fatalf("first request %d", st)
	}
	if resp, _ := sendNumbered(t, url, 3, hdr); resp.StatusCode != 200 || a.hits.Load() != 2 || b.hits.Load() != 1 {
		t.Fatalf("third request %d went to %d/%d", resp.StatusCode, a.hits.Load(), b.hits.Load())
	}
}
