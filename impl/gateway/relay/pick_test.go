package relay

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// answering is an upstream that answers every request with status (200:
// a Messages answer), counting the requests it got.
func answering(t *testing.T, status int, hdr map[string]string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		for k, v := range hdr {
			w.Header().Set(k, v)
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == 200 {
			io.WriteString(w, `{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`)
			return
		}
		io.WriteString(w, `{"type":"error","error":{"type":"api_error","message":"failed"}}`)
	}))
	t.Cleanup(srv.Close)
	return srv, &hits
}

// routedHandler serves fixture upstreams through a handler with a board
// and a settable clock.
func routedHandler(t *testing.T, now *fakeclock.Clock, o Options, ups ...store.Upstream) (string, *Handler) {
	t.Helper()
	o.Source = fakeSource{fixture(ups...)}
	if o.Board == nil {
		o.Board = routing.NewBoard(nil)
	}
	o.Clock = now
	h := New(o)
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL, h
}

func send(t *testing.T, url string) (*http.Response, string) {
	t.Helper()
	return post(t, url+"/v1/messages", map[string]string{"x-api-key": "sk-good"}, `{"model":"claude-test","max_tokens":5}`)
}

// A 429 takes its upstream out of routing until its retry-after: the
// requests after it are not sent there (not even to fail over), and the
// upstream is tried again once the cooldown is over.
func TestCooldownKeepsRequestsOffARateLimitedUpstream(t *testing.T) {
	t.Parallel()
	limited, limitedHits := answering(t, 429, map[string]string{"Retry-After": "60"})
	good, goodHits := answering(t, 200, nil)
	now := fakeclock.New(time.Unix(0, 0))
	now.Set(time.Unix(1000, 0))
	url, h := routedHandler(t, now, Options{Metrics: nil},
		oauthUpstream("up_o", limited.URL, `{"access_token":"tok"}`), apiKeyUpstream("up_k", good.URL, "sk-upstream"))
	for i := range 3 {
		if resp, b := send(t, url); resp.StatusCode != 200 {
			t.Fatalf("request %d: %d %s", i, resp.StatusCode, b)
		}
	}
	if limitedHits.Load() != 1 || goodHits.Load() != 3 {
		t.Fatalf("limited upstream got %d requests, good %d; want 1 and 3", limitedHits.Load(), goodHits.Load())
	}
	if st := h.board.Read("up_o", time.Unix(1000, 0)); !st.CooldownUntil.Equal(time.Unix(1060, 0)) {
		t.Fatalf("cooldown until %v, want the retry-after's end", st.CooldownUntil)
	}
	now.Set(time.Unix(1060, 0))
	send(t, url)
	if limitedHits.Load() != 2 {
		t.Fatalf("after the cooldown the subscription was not tried again (%d requests)", limitedHits.Load())
	}
}

// When every candidate is cooling down the proxy answers 429 itself, with
// the time the first comes back in retry-after, and sends nothing.
func TestAllCoolingAnswers429WithRetryAfter(t *testing.T) {
	t.Parallel()
	now := fakeclock.New(time.Unix(0, 0))
	now.Set(time.Unix(1000, 0))
	reset := time.Unix(1090, 0).UTC().Format(time.RFC3339)
	limited, hits := answering(t, 429, map[string]string{"anthropic-ratelimit-requests-remaining": "0", "anthropic-ratelimit-requests-reset": reset})
	url, _ := routedHandler(t, now, Options{}, apiKeyUpstream("up_k", limited.URL, "sk-upstream"))
	if resp, _ := send(t, url); resp.StatusCode != 429 {
		t.Fatalf("first request: %d, want the provider's 429", resp.StatusCode)
	}
	now.Set(time.Unix(1030, 0))
	resp, b := send(t, url)
	wantAnthropicError(t, resp, b, 429, "rate_limit_error")
	if got := resp.Header.Get("Retry-After"); got != "60" {
		t.Fatalf("retry-after %q, want 60 (the reset is 60 s away)", got)
	}
	if got := resp.Header.Get("X-Should-Retry"); got != "true" {
		t.Fatalf("x-should-retry %q", got)
	}
	if hits.Load() != 1 {
		t.Fatalf("the cooling upstream got %d requests, want 1", hits.Load())
	}
}

// 500, 502 and 504 before the first byte fail over like 429/529; the last
// candidate's answer is the client's.
func TestFailoverOnServerErrors(t *testing.T) {
	t.Parallel()
	for _, code := range []int{500, 502, 503, 504, 529} {
		t.Run(strconv.Itoa(code), func(t *testing.T) {
			t.Parallel()
			bad, badHits := answering(t, code, nil)
			good, goodHits := answering(t, 200, nil)
			now := fakeclock.New(time.Unix(0, 0))
			url, _ := routedHandler(t, now, Options{},
				oauthUpstream("up_o", bad.URL, `{"access_token":"tok"}`), apiKeyUpstream("up_k", good.URL, "sk-upstream"))
			if resp, b := send(t, url); resp.StatusCode != 200 || badHits.Load() != 1 || goodHits.Load() != 1 {
				t.Fatalf("%d %s; bad %d good %d", resp.StatusCode, b, badHits.Load(), goodHits.Load())
			}
		})
	}
	t.Run("connection refused", func(t *testing.T) {
		t.Parallel()
		good, goodHits := answering(t, 200, nil)
		now := fakeclock.New(time.Unix(0, 0))
		url, _ := routedHandler(t, now, Options{},
			oauthUpstream("up_o", refusingURL, `{"access_token":"tok"}`), apiKeyUpstream("up_k", good.URL, "sk-upstream"))
		if resp, b := send(t, url); resp.StatusCode != 200 || goodHits.Load() != 1 {
			t.Fatalf("%d %s", resp.StatusCode, b)
		}
	})
}

// A request is sent to at most MaxAttempts upstreams.
func TestFailoverAttemptBudget(t *testing.T) {
	t.Parallel()
	var ups []store.Upstream
	var hits []*atomic.Int32
	for i := range 5 {
		srv, n := answering(t, 502, nil)
		ups = append(ups, apiKeyUpstream("up_"+strconv.Itoa(i), srv.URL, "sk-upstream"))
		hits = append(hits, n)
	}
	now := fakeclock.New(time.Unix(0, 0))
	url, _ := routedHandler(t, now, Options{MaxAttempts: 2}, ups...)
	resp, _ := send(t, url)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d, want the last attempt's 502", resp.StatusCode)
	}
	var total int32
	for _, n := range hits {
		total += n.Load()
	}
	if total != 2 {
		t.Fatalf("%d attempts, want the budget of 2", total)
	}
}

// New requests are spread over a priority class by weight; the API keys
// get nothing while a subscription is usable.
func TestSpreadByWeightWithinPriorityClass(t *testing.T) {
	t.Parallel()
	a, aHits := answering(t, 200, nil)
	b, bHits := answering(t, 200, nil)
	k, kHits := answering(t, 200, nil)
	ua := oauthUpstream("up_a", a.URL, `{"access_token":"tok"}`)
	ub := oauthUpstream("up_b", b.URL, `{"access_token":"tok"}`)
	ua.Weight, ub.Weight = 1, 3
	now := fakeclock.New(time.Unix(0, 0))
	uk := apiKeyUpstream("up_k", k.URL, "sk-upstream")
	uk.Weight = 1
	url, h := routedHandler(t, now, Options{}, uk, ua, ub)
	// The draw cycles through every value, so the split is exact.
	var draws atomic.Uint64
	h.randN = func(n uint64) uint64 { return (draws.Add(1) - 1) % n }
	for range 40 {
		if resp, body := send(t, url); resp.StatusCode != 200 {
			t.Fatalf("%d %s", resp.StatusCode, body)
		}
	}
	if aHits.Load() != 10 || bHits.Load() != 30 || kHits.Load() != 0 {
		t.Fatalf("a %d, b %d (weight 3), api key %d; want 10, 30, 0", aHits.Load(), bHits.Load(), kHits.Load())
	}
}

// A standby upstream (weight 0) gets work only when the weighted ones of
// its class fail, and before the next class.
func TestStandbyUpstreamsAfterWeightedOnes(t *testing.T) {
	t.Parallel()
	up := func(id, kind string, w int) *snapshot.Upstream {
		return &snapshot.Upstream{ID: id, Kind: kind, Weight: w}
	}
	cands := []*snapshot.Upstream{up("o_standby", store.KindVendorOAuth, 0), up("o_1", store.KindVendorOAuth, 1), up("o_2", store.KindVendorOAuth, 2),
		up("k_standby", store.KindVendorAPIKey, 0), up("k_1", store.KindVendorAPIKey, 5)}
	for draw, want := range map[uint64]string{
		0: "o_1 o_2 o_standby k_1 k_standby",
		1: "o_2 o_1 o_standby k_1 k_standby",
		2: "o_2 o_1 o_standby k_1 k_standby",
	} {
		p := picker{cands: cands, spread: true, randN: func(uint64) uint64 { return draw }}
		var got []string
		for u := p.next(); u != nil; u = p.next() {
			got = append(got, u.ID)
		}
		if strings.Join(got, " ") != want {
			t.Errorf("draw %d: order %v, want %s", draw, got, want)
		}
	}
	// A plugin's order is kept as it is.
	p := picker{cands: cands, randN: func(uint64) uint64 { return 1 }}
	var got []string
	for u := p.next(); u != nil; u = p.next() {
		got = append(got, u.ID)
	}
	if strings.Join(got, " ") != "o_standby o_1 o_2 k_standby k_1" {
		t.Errorf("without spreading: %v", got)
	}
}

// Spreading skips a cooling upstream and allocates nothing.
func TestPlanSkipsCoolingWithoutAllocating(t *testing.T) {
	s := fixture(apiKeyUpstream("up_1", "http://a.invalid", "k"), apiKeyUpstream("up_2", "http://b.invalid", "k"), apiKeyUpstream("up_3", "http://c.invalid", "k"))
	b := routing.NewBoard(nil)
	now := time.Unix(1000, 0)
	b.CoolDown("up_2", now.Add(time.Minute))
	h := New(Options{Source: fakeSource{s}, Board: b})
	cands := s.Usable
	var l attemptList
	if n := testing.AllocsPerRun(200, func() {
		l = attemptList{}
		h.plan(&l, cands, true, affinity.Key{}, now)
	}); n != 0 {
		t.Fatalf("%v allocations per plan", n)
	}
	if l.n != 2 || !l.soonest.Equal(now.Add(time.Minute)) {
		t.Fatalf("planned %d (soonest %v), want the two not cooling", l.n, l.soonest)
	}
	for _, u := range l.ups() {
		if u.ID == "up_2" {
			t.Fatal("the cooling upstream was planned")
		}
	}
}

// An upstream out of routing (revoked credential) takes no place in the
// attempt budget: with a budget of one the request still reaches the next.
func TestRevokedUpstreamTakesNoAttempt(t *testing.T) {
	t.Parallel()
	good, goodHits := answering(t, 200, nil)
	now := fakeclock.New(time.Unix(0, 0))
	url, _ := routedHandler(t, now, Options{MaxAttempts: 1}, revokedUpstream("up_o", "http://revoked.invalid"), apiKeyUpstream("up_k", good.URL, "sk-upstream"))
	if resp, b := send(t, url); resp.StatusCode != 200 || goodHits.Load() != 1 {
		t.Fatalf("%d %s", resp.StatusCode, b)
	}
}
