package relay

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// accounts are upstreams that answer with status (200 unless set) and
// count the requests each got.
type accounts struct {
	mu     sync.Mutex
	hits   map[string]int
	status map[string]int
}

func newAccounts(t *testing.T, ids ...string) (*accounts, []store.Upstream) {
	t.Helper()
	a := &accounts{hits: map[string]int{}, status: map[string]int{}}
	var ups []store.Upstream
	for _, id := range ids {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			a.mu.Lock()
			a.hits[id]++
			st := a.status[id]
			a.mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			if st != 0 {
				w.Header().Set("Retry-After", "60")
				w.WriteHeader(st)
				_, _ = w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"limited"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"id":"msg_1","type":"message","content":[],"usage":{"input_tokens":1,"output_tokens":1}}`))
		}))
		t.Cleanup(srv.Close)
		u := apiKeyUpstream(id, srv.URL, "sk-upstream")
		u.Weight = 1
		ups = append(ups, u)
	}
	return a, ups
}

func (a *accounts) take() map[string]int {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.hits
	a.hits = map[string]int{}
	return out
}

func (a *accounts) set(id string, status int) {
	a.mu.Lock()
	a.status[id] = status
	a.mu.Unlock()
}

func sendSession(t *testing.T, url, session string) {
	t.Helper()
	resp, b := post(t, url+"/v1/messages", map[string]string{"x-api-key": "sk-good", "X-Claude-Code-Session-Id": session}, `{"model":"claude-test","max_tokens":5}`)
	if resp.StatusCode != 200 {
		t.Fatalf("session %s: %d %s", session, resp.StatusCode, b)
	}
}

// only returns the one upstream of hits, failing when there were several.
func only(t *testing.T, hits map[string]int, what string) string {
	t.Helper()
	if len(hits) != 1 {
		t.Fatalf("%s went to %v, want one upstream", what, hits)
	}
	for id := range hits {
		return id
	}
	return ""
}

// A session's requests stay on one upstream; when it cools down the
// session moves once, to one other upstream, and stays there when the
// first comes back: moving back would lose the prompt cache again.
func TestSessionMovesOnceAndStays(t *testing.T) {
	t.Parallel()
	accts, ups := newAccounts(t, "up_1", "up_2", "up_3")
	now := fakeclock.New(time.Unix(0, 0))
	now.Set(time.Unix(1000, 0))
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	url, h := routedHandler(t, now, Options{Affinity: affinity.NewTable(), Metrics: m}, ups...)
	for range 6 {
		sendSession(t, url, "sess-a")
	}
	home := only(t, accts.take(), "a session's requests")

	h.board.CoolDown(home, time.Unix(1060, 0))
	for range 4 {
		sendSession(t, url, "sess-a")
	}
	moved := only(t, accts.take(), "the session's requests while its upstream cooled down")
	if moved == home {
		t.Fatal("a request went to the cooling upstream")
	}
	now.Set(time.Unix(1061, 0)) // the cooldown is over
	for range 4 {
		sendSession(t, url, "sess-a")
	}
	if got := only(t, accts.take(), "the session after the cooldown"); got != moved {
		t.Fatalf("the session went back to %s after its upstream recovered; it should stay on %s", got, moved)
	}
	if n := testutil.ToFloat64(m.affinityMoves); n != 1 {
		t.Fatalf("svc_proxy_affinity_moves_total %v, want 1", n)
	}
}

// A 429 on the session's upstream fails the request over to the upstream
// the session's next request goes to: one move, not two.
func TestSessionFailoverGoesWhereTheNextRequestGoes(t *testing.T) {
	t.Parallel()
	accts, ups := newAccounts(t, "up_1", "up_2", "up_3", "up_4")
	now := fakeclock.New(time.Unix(0, 0))
	now.Set(time.Unix(1000, 0))
	url, _ := routedHandler(t, now, Options{Affinity: affinity.NewTable()}, ups...)
	sendSession(t, url, "sess-b")
	home := only(t, accts.take(), "the first request")
	accts.set(home, 429)
	sendSession(t, url, "sess-b")
	failedOver := accts.take()
	if failedOver[home] != 1 || len(failedOver) != 2 {
		t.Fatalf("the rate-limited request went to %v, want its upstream then one other", failedOver)
	}
	delete(failedOver, home)
	target := only(t, failedOver, "the failover")
	for range 3 {
		sendSession(t, url, "sess-b")
	}
	if got := only(t, accts.take(), "the follow-ups"); got != target {
		t.Fatalf("follow-ups went to %s, the failover to %s", got, target)
	}
}

// Two replicas (own tables, own boards) place a session alike without a
// word between them: the rendezvous choice is a function of the session
// and the upstreams.
func TestReplicasPlaceASessionAlike(t *testing.T) {
	t.Parallel()
	accts, ups := newAccounts(t, "up_1", "up_2", "up_3")
	now := fakeclock.New(time.Unix(0, 0))
	now.Set(time.Unix(1000, 0))
	urlA, _ := routedHandler(t, now, Options{Affinity: affinity.NewTable()}, ups...)
	urlB, _ := routedHandler(t, now, Options{Affinity: affinity.NewTable()}, ups...)
	for i := range 20 {
		s := "sess-" + string(rune('a'+i))
		sendSession(t, urlA, s)
		sendSession(t, urlB, s)
		only(t, accts.take(), "session "+s+" through two replicas")
	}
}

// Sessions spread over equal upstreams; session-less requests too.
func TestSessionsSpreadOverUpstreams(t *testing.T) {
	t.Parallel()
	accts, ups := newAccounts(t, "up_1", "up_2")
	now := fakeclock.New(time.Unix(0, 0))
	url, _ := routedHandler(t, now, Options{Affinity: affinity.NewTable()}, ups...)
	for i := range 40 {
		sendSession(t, url, "s"+strings.Repeat("x", i))
	}
	if hits := accts.take(); hits["up_1"] < 10 || hits["up_2"] < 10 {
		t.Fatalf("40 sessions landed %v", hits)
	}
}

// Past a usage threshold an upstream takes no new work while another of
// its class can; sessions on it move (like on a cooldown); when the rest
// of the class cools down it serves again as standby.
func TestUsageThresholdTakesNewWorkElsewhere(t *testing.T) {
	t.Parallel()
	accts, ups := newAccounts(t, "up_full", "up_free")
	ups[0].MaxUtilization7d = 90
	now := fakeclock.New(time.Unix(0, 0))
	now.Set(time.Unix(1000, 0))
	board := routing.NewBoard(nil)
	url, h := routedHandler(t, now, Options{Affinity: affinity.NewTable(), Board: board}, ups...)
	// Find a session whose rendezvous choice is up_full.
	var sess string
	for i := 0; sess == ""; i++ {
		s := "sess-" + strings.Repeat("y", i)
		sendSession(t, url, s)
		if accts.take()["up_full"] == 1 {
			sess = s
		}
	}
	reset := time.Unix(1000+3600, 0)
	board.SetUsage("up_full", store.QuotaWindows{SevenDay: store.QuotaWindow{Utilization: 91, ResetsAt: &reset}})
	for range 10 {
		send(t, url)
	}
	sendSession(t, url, sess)
	if hits := accts.take(); hits["up_full"] != 0 || hits["up_free"] != 11 {
		t.Fatalf("past the threshold %v, want every request on up_free", hits)
	}
	// The window resets: the moved session stays where it went.
	now.Set(time.Unix(reset.Unix(), 0))
	sendSession(t, url, sess)
	if hits := accts.take(); hits["up_free"] != 1 {
		t.Fatalf("after the reset the moved session went to %v", hits)
	}
	// Past the threshold but the only upstream not cooling: it serves.
	board.SetUsage("up_full", store.QuotaWindows{SevenDay: store.QuotaWindow{Utilization: 95}})
	h.board.CoolDown("up_free", time.Unix(reset.Unix()+60, 0))
	send(t, url)
	if hits := accts.take(); hits["up_full"] != 1 {
		t.Fatalf("with the rest cooling %v, want the upstream past its threshold", hits)
	}
}

// A session's plan is its rendezvous order, the same on every call, and
// costs no allocation.
func TestSessionPlanIsTheRendezvousOrder(t *testing.T) {
	var ups []store.Upstream
	for _, id := range []string{"up_1", "up_2", "up_3", "up_4"} {
		u := apiKeyUpstream(id, "http://"+id+".invalid", "k")
		u.Weight = 1
		ups = append(ups, u)
	}
	s := fixture(ups...)
	h := New(Options{Source: fakeSource{s}, Board: routing.NewBoard(nil), Affinity: affinity.NewTable(), MaxAttempts: 4})
	k := affinity.HeaderKey("pr_a", "sess-plan")
	now := time.Unix(1000, 0)
	var l attemptList
	if n := testing.AllocsPerRun(200, func() {
		l = attemptList{}
		h.plan(&l, s.Usable, true, k, now)
	}); n != 0 {
		t.Fatalf("%v allocations per plan", n)
	}
	want := slices.Clone(s.Usable)
	slices.SortFunc(want, func(a, b *snapshot.Upstream) int {
		sa, sb := affinity.Score(k, a.ID, 1), affinity.Score(k, b.ID, 1)
		switch {
		case sa > sb:
			return -1
		case sa < sb:
			return 1
		}
		return 0
	})
	if !slices.Equal(l.ups(), want) {
		t.Fatalf("plan %v, want rendezvous order %v", ids(l.ups()), ids(want))
	}
	// A moved session starts where it was moved to, then the same order.
	h.affinity.Land(k, want[2].ID, want[0].ID, now)
	l = attemptList{}
	h.plan(&l, s.Usable, true, k, now)
	wantMoved := append([]*snapshot.Upstream{want[2]}, want[0], want[1], want[3])
	if !slices.Equal(l.ups(), wantMoved) {
		t.Fatalf("moved plan %v, want %v", ids(l.ups()), ids(wantMoved))
	}
}

func ids(ups []*snapshot.Upstream) []string {
	out := make([]string, len(ups))
	for i, u := range ups {
		out[i] = u.ID
	}
	return out
}

// Without Claude Code's header, a principal with cache keep-alive groups
// the turns of a conversation by the keep-alive session's prompt hash:
// every turn lands on one account; a principal without keep-alive is
// spread request by request.
func TestKeepAliveSessionsStayOnOneUpstream(t *testing.T) {
	t.Parallel()
	for _, keepAlive := range []bool{true, false} {
		accts, ups := newAccounts(t, "up_1", "up_2", "up_3")
		cfg := fixtureConfig(ups...)
		if keepAlive {
			cfg.Principals[0].CacheKeepalive = []byte(`{"enabled":true}`)
		}
		h := New(Options{Source: fakeSource{snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))}, Board: routing.NewBoard(nil), Affinity: affinity.NewTable()})
		srv := httptest.NewServer(h)
		t.Cleanup(srv.Close)
		msgs := `{"role":"user","content":[{"type":"text","text":"fix the bug","cache_control":{"type":"ephemeral"}}]}`
		for turn := range 12 {
			resp, b := post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good"},
				`{"model":"claude-test","max_tokens":5,"system":"be brief","messages":[`+msgs+`]}`)
			if resp.StatusCode != 200 {
				t.Fatalf("turn %d: %d %s", turn, resp.StatusCode, b)
			}
			msgs += `,{"role":"assistant","content":"done ` + strings.Repeat("x", turn) + `"},{"role":"user","content":"next"}`
		}
		hits := accts.take()
		if keepAlive && len(hits) != 1 {
			t.Fatalf("a keep-alive conversation's turns went to %v, want one upstream", hits)
		}
		// 12 requests drawn over three equal upstreams all on one: 6e-6.
		if !keepAlive && len(hits) == 1 {
			t.Fatalf("without keep-alive or a session header 12 requests all went to %v: spreading is off", hits)
		}
	}
}
