package relay

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

// burst sends n requests at once from the fixture's principal, capped at
// limit in flight, to an upstream that holds every request until the
// test lets them go once limit are held and the rest wait (or were
// refused). It returns the statuses, the most the upstream ever held and
// the handler's metrics.
func burst(t *testing.T, n, limit int, ctl *admission.Controller, letGo func(h *Handler, held int) bool) ([]int, []string, int32, *Metrics) {
	t.Helper()
	var held, most atomic.Int32
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c := held.Add(1)
		for {
			m := most.Load()
			if c <= m || most.CompareAndSwap(m, c) {
				break
			}
		}
		<-release
		held.Add(-1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`))
	}))
	t.Cleanup(srv.Close)
	cfg := fixtureConfig(apiKeyUpstream("up_1", srv.URL, "sk-upstream"))
	cfg.Principals[0].MaxInFlight = limit
	m := NewMetrics(prometheus.NewRegistry())
	h := New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, cfg.Principals[0].CreatedAt)}, Admission: ctl, Metrics: m})
	px := httptest.NewServer(h)
	t.Cleanup(px.Close)
	statuses := make([]int, n)
	retry := make([]string, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, _ := send(t, px.URL)
			statuses[i], retry[i] = resp.StatusCode, resp.Header.Get("Retry-After")
		}()
	}
	waitfor.True(t, "the burst to reach the point where it is let go", func() bool { return letGo(h, int(held.Load())) })
	close(release)
	wg.Wait()
	return statuses, retry, most.Load(), m
}

// A burst of 20 parallel requests from one principal capped at 4 is
// served in full, never more than 4 at the upstream at once, without a
// 429 (docs/routing.md, "Concurrency caps and the queue").
func TestBurstWithinCapIsQueuedNotRefused(t *testing.T) {
	t.Parallel()
	ctl := admission.New(admission.Options{QueueLength: 32})
	statuses, _, most, m := burst(t, 20, 4, ctl, func(h *Handler, held int) bool {
		_, queued := ctl.State("pr_a")
		return held == 4 && queued == 16
	})
	for i, st := range statuses {
		if st != 200 {
			t.Fatalf("request %d: %d", i, st)
		}
	}
	if most > 4 {
		t.Fatalf("the upstream held %d at once, past the cap of 4", most)
	}
	if n := testutil.ToFloat64(m.queueRefused); n != 0 {
		t.Fatalf("%v refused", n)
	}
	if n := testutil.CollectAndCount(m.queueWait); n != 1 {
		t.Fatalf("queue wait histogram: %d series", n)
	}
}

// Without a queue the same burst gets 429 rate_limit_error with a
// retry-after for everything past the cap.
func TestBurstWithoutQueueIsRefusedPastTheCap(t *testing.T) {
	t.Parallel()
	ctl := admission.New(admission.Options{QueueLength: -1})
	var refusedSeen int
	statuses, retry, _, m := burst(t, 20, 4, ctl, func(h *Handler, held int) bool {
		refusedSeen = int(testutil.ToFloat64(h.metrics.queueRefused))
		return held == 4 && refusedSeen == 16
	})
	ok, limited := 0, 0
	for i, st := range statuses {
		switch st {
		case 200:
			ok++
		case 429:
			limited++
			if retry[i] == "" {
				t.Fatalf("a 429 without retry-after")
			}
		default:
			t.Fatalf("request %d: %d", i, st)
		}
	}
	if ok != 4 || limited != 16 || testutil.ToFloat64(m.queueRefused) != 16 {
		t.Fatalf("%d served, %d refused", ok, limited)
	}
}

// An uncapped principal's request takes no slot.
func TestUncappedPrincipalTakesNoSlot(t *testing.T) {
	t.Parallel()
	good, _ := answering(t, 200, nil)
	ctl := admission.New(admission.Options{})
	cfg := fixtureConfig(apiKeyUpstream("up_1", good.URL, "sk-upstream"))
	h := New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, cfg.Principals[0].CreatedAt)}, Admission: ctl})
	px := httptest.NewServer(h)
	t.Cleanup(px.Close)
	if resp, b := send(t, px.URL); resp.StatusCode != 200 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
	if in, q := ctl.State("pr_a"); in != 0 || q != 0 {
		t.Fatalf("uncapped principal counted: %d %d", in, q)
	}
}
