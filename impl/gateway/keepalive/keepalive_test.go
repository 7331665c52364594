package keepalive

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

const turn1 = `{"model":"claude-sonnet-4-5","max_tokens":512,"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
"messages":[{"role":"user","content":[{"type":"text","text":"long document ...","cache_control":{"type":"ephemeral"}},{"type":"text","text":"question one"}]}]}`

const turn2 = `{"model":"claude-sonnet-4-5","max_tokens":512,"system":[{"type":"text","text":"You are terse.","cache_control":{"type":"ephemeral"}}],
"messages":[{"role":"user","content":[{"type":"text","text":"long document ...","cache_control":{"type":"ephemeral"}},{"type":"text","text":"question one"}]},
{"role":"assistant","content":"answer one"},{"role":"user","content":[{"type":"text","text":"question two","cache_control":{"type":"ephemeral","ttl":"1h"}}]}]}`

func TestParsePrompt(t *testing.T) {
	p1, err := ParsePrompt("pr_1", []byte(turn1))
	if err != nil {
		t.Fatal(err)
	}
	p2, err := ParsePrompt("pr_1", []byte(turn2))
	if err != nil {
		t.Fatal(err)
	}
	if p1.Hash != p2.Hash || len(p1.Hash) != 64 {
		t.Fatalf("turns of one conversation hash differently: %s %s", p1.Hash, p2.Hash)
	}
	if other, _ := ParsePrompt("pr_2", []byte(turn1)); other.Hash == p1.Hash {
		t.Fatal("another principal's conversation shares the session")
	}
	if p1.TTL != 5*time.Minute || p2.TTL != time.Hour {
		t.Fatalf("ttl %s %s", p1.TTL, p2.TTL)
	}
	var r struct {
		MaxTokens int               `json:"max_tokens"`
		Stream    *bool             `json:"stream"`
		Messages  []json.RawMessage `json:"messages"`
	}
	json.Unmarshal(p1.Refresh, &r)
	if r.MaxTokens != 1 || r.Stream != nil || len(r.Messages) != 1 || strings.Contains(string(p1.Refresh), "question one") ||
		!strings.Contains(string(p1.Refresh), "long document") || !strings.Contains(string(p1.Refresh), "You are terse.") {
		t.Fatalf("refresh request %s", p1.Refresh)
	}
	json.Unmarshal(p2.Refresh, &r)
	if len(r.Messages) != 3 || !strings.Contains(string(p2.Refresh), "question two") {
		t.Fatalf("refresh of turn 2 %s", p2.Refresh)
	}
	if _, err := ParsePrompt("pr_1", []byte(`{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"hi"}]}`)); err == nil {
		t.Fatal("a prompt without breakpoints was tracked")
	}
}

func TestClassify(t *testing.T) {
	c := &Config{}
	c.Classifier.ExtraWaitForUserTools = []string{"ask_user"}
	amb := &Config{}
	amb.Classifier.TreatEndTurnAsAmbiguous = true
	for _, tc := range []struct {
		cfg  *Config
		a    Answer
		want Verdict
	}{
		{c, Answer{StopReason: "end_turn"}, WaitingOnUser},
		{amb, Answer{StopReason: "end_turn"}, Ambiguous},
		{c, Answer{StopReason: "tool_use", ToolNames: []string{"bash"}}, NotWaiting},
		{c, Answer{StopReason: "tool_use", ToolNames: []string{"bash", "ask_user"}}, WaitingOnUser},
		{c, Answer{StopReason: "max_tokens"}, NotWaiting},
		{c, Answer{}, NotWaiting},
	} {
		if got := tc.cfg.Classify(tc.a); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.a, got, tc.want)
		}
	}
	sse := [][]byte{[]byte(`data: {"type":"message_start","message":{}}`),
		[]byte(`data: {"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t","name":"ask_user","input":{}}}`),
		[]byte(`data: {"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":3}}`)}
	if a := ReadAnswer(nil, sse); a.StopReason != "tool_use" || len(a.ToolNames) != 1 || a.ToolNames[0] != "ask_user" {
		t.Fatalf("stream answer %+v", a)
	}
	if a := ReadAnswer([]byte(`{"stop_reason":"end_turn","content":[{"type":"text","text":"x"}]}`), nil); a.StopReason != "end_turn" {
		t.Fatalf("body answer %+v", a)
	}
}

// cacheProvider keeps prompt caches by exact prefix with expiry on a clock.
type cacheProvider struct {
	mu     sync.Mutex
	now    func() time.Time
	cached map[string]time.Time
	calls  int
	status int
}

func (c *cacheProvider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	c.mu.Lock()
	defer c.mu.Unlock()
	c.calls++
	if c.status != 0 {
		w.WriteHeader(c.status)
		return
	}
	// The sealed refresh is the whole cached prefix: key it by its messages.
	var req struct {
		System   json.RawMessage `json:"system"`
		Messages json.RawMessage `json:"messages"`
	}
	json.Unmarshal(b, &req)
	key := string(req.System) + string(req.Messages)
	read := int64(0)
	if exp, ok := c.cached[key]; ok && c.now().Before(exp) {
		read = 100
	}
	c.cached[key] = c.now().Add(5 * time.Minute)
	json.NewEncoder(w).Encode(map[string]any{"type": "message", "usage": map[string]any{"input_tokens": 1, "output_tokens": 1,
		"cache_read_input_tokens": read, "cache_creation_input_tokens": 100 - read}})
}

type jobs struct {
	mu  sync.Mutex
	got []scheduler.Enqueue
}

func (j *jobs) Enqueue(_ context.Context, e scheduler.Enqueue) (bool, int64, error) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.got = append(j.got, e)
	return true, int64(len(j.got)), nil
}
func (j *jobs) Family(context.Context, string, string) ([]scheduler.JobInfo, error) { return nil, nil }
func (j *jobs) DeleteJobs(context.Context, []int64) (int64, error)                  { return 0, nil }
func (j *jobs) last() scheduler.Enqueue                                             { j.mu.Lock(); defer j.mu.Unlock(); return j.got[len(j.got)-1] }

type env struct {
	svc   *Service
	st    store.Store
	prov  *cacheProvider
	jobs  *jobs
	reg   *prometheus.Registry
	clk   *fakeclock.Clock
	pr    *store.Principal
	upURL string
}

func (e *env) clock() time.Time { return e.clk.Now() }

const kaCfg = `{"enabled":true,"refresh_lead_time_5m_secs":30,"refresh_lead_time_1h_secs":120,"max_refreshes_per_session":3,"max_total_duration_secs":3600,"snapshot_max_bytes":1048576,"classifier":{"extra_wait_for_user_tools":[],"treat_end_turn_as_ambiguous":false}}`

func setup(t *testing.T) *env {
	t.Helper()
	e := &env{clk: fakeclock.New(time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)), jobs: &jobs{}, reg: prometheus.NewRegistry()}
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "k.db"), sqlite.Options{Clock: e.clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	e.st = st
	e.prov = &cacheProvider{now: e.clock, cached: map[string]time.Time{}}
	srv := httptest.NewServer(e.prov)
	t.Cleanup(srv.Close)
	e.upURL = srv.URL
	box, _ := secret.New(bytes.Repeat([]byte{9}, 32))
	e.pr, err = st.CreatePrincipal(context.Background(), store.Principal{Name: "app", Kind: "machine", AllowedModels: []string{"*"},
		DefaultLimits: json.RawMessage(`[]`), CacheKeepalive: json.RawMessage(kaCfg), Enabled: true})
	if err != nil {
		t.Fatal(err)
	}
	e.svc = service.Init(service.Options{Clock: e.clk}, &Service{Store: st, Box: box, Jobs: e.jobs, Metrics: NewMetrics(e.reg), HTTP: srv.Client(),
		Upstream: func(id string) *snapshot.Upstream {
			if id != "up_1" {
				return nil
			}
			return &snapshot.Upstream{ID: "up_1", Kind: store.KindVendorAPIKey, Enabled: true, Credential: "k", MessagesURL: srv.URL + "/v1/messages"}
		}})
	return e
}

func (e *env) turn(t *testing.T, body, answer string) {
	t.Helper()
	x := relay.Exchange{PrincipalID: e.pr.ID, KeepAlive: e.pr.CacheKeepalive, UpstreamID: "up_1", Request: []byte(body), Status: 200,
		Anchor: e.clock(), Body: []byte(answer)}
	if err := e.svc.Track(context.Background(), x); err != nil {
		t.Fatal(err)
	}
}

func (e *env) run(t *testing.T, en scheduler.Enqueue) scheduler.Outcome {
	t.Helper()
	out, err := e.svc.refreshJob(context.Background(), scheduler.Job{Type: JobType, IdempotencyKey: en.IdempotencyKey, Payload: en.Payload, Attempt: 1, MaxAttempts: 1})
	if err != nil {
		t.Fatalf("refresh jobs never fail (no retry): %v", err)
	}
	return out
}

func (e *env) refreshes(outcome string) float64 {
	return testutil.ToFloat64(e.svc.Metrics.Refresh.WithLabelValues(outcome))
}

const endTurn = `{"stop_reason":"end_turn","content":[{"type":"text","text":"ok"}]}`

// P-KA-2: the first refresh is due at anchor + TTL − lead; a refresh keeps
// the cache (hit) and the next one follows the new anchor. Without
// keep-alive an idle conversation misses.
func TestRefreshKeepsCacheWarm(t *testing.T) {
	e := setup(t)
	// The provider caches the turn's prefix when the turn is served.
	p, _ := ParsePrompt(e.pr.ID, []byte(turn1))
	e.prov.cached[cacheKey(p.Refresh)] = e.clock().Add(5 * time.Minute)
	anchor := e.clock()
	e.turn(t, turn1, endTurn)
	first := e.jobs.last()
	if !first.RunAt.Equal(anchor.Add(5*time.Minute - 30*time.Second)) {
		t.Fatalf("first refresh at %s, want anchor+5m-30s", first.RunAt)
	}
	e.clk.Set(first.RunAt)
	if out := e.run(t, first); out != scheduler.OutcomeDone || e.refreshes(OutcomeRefreshed) != 1 {
		t.Fatalf("refresh %q", out)
	}
	second := e.jobs.last()
	if second.IdempotencyKey == first.IdempotencyKey || !second.RunAt.Equal(e.clk.Now().Add(5*time.Minute-30*time.Second)) {
		t.Fatalf("second refresh %+v", second)
	}
	// Idle 9.5 minutes after the turn: still cached thanks to the refresh.
	e.clk.Set(second.RunAt)
	e.run(t, second)
	if e.refreshes(OutcomeRefreshed) != 2 {
		t.Fatal("the cache was not kept warm")
	}
	// Bounds: the budget of 3 refreshes ends the session.
	third := e.jobs.last()
	e.clk.Set(third.RunAt)
	e.run(t, third)
	n := len(e.jobs.got)
	sess, _ := e.st.GetKeepAliveSession(context.Background(), sessionOf(t, third))
	if sess.State != "stopped" || sess.StopReason != OutcomeBoundReached || sess.Refreshes != 3 {
		t.Fatalf("after the budget: %+v", sess)
	}
	if len(e.jobs.got) != n {
		t.Fatal("a refresh was scheduled past the budget")
	}
}

func cacheKey(refresh []byte) string {
	var req struct {
		System   json.RawMessage `json:"system"`
		Messages json.RawMessage `json:"messages"`
	}
	json.Unmarshal(refresh, &req)
	return string(req.System) + string(req.Messages)
}

func sessionOf(t *testing.T, en scheduler.Enqueue) string {
	var p payload
	json.Unmarshal(en.Payload, &p)
	return p.SessionID
}

// A refresh after the cache expired is a miss: terminal, not retried.
func TestCacheMissStops(t *testing.T) {
	e := setup(t)
	e.turn(t, turn1, endTurn)
	first := e.jobs.last()
	e.clk.Set(first.RunAt.Add(10 * time.Minute)) // the cache is long gone
	if out := e.run(t, first); out != scheduler.OutcomeSkip || e.refreshes(OutcomeCacheMiss) != 1 {
		t.Fatalf("miss: %q", out)
	}
}

// P-KA-1, P-KA-4: the snapshot is sealed with associated data bound to
// principal, session, upstream, generation and job version; tampering with
// any of them fails decryption, which is terminal and counted.
func TestSnapshotBinding(t *testing.T) {
	e := setup(t)
	e.turn(t, turn1, endTurn)
	first := e.jobs.last()
	sess, _ := e.st.GetKeepAliveSession(context.Background(), sessionOf(t, first))
	if bytes.Contains(sess.Snapshot, []byte("long document")) {
		t.Fatal("the snapshot is stored in the clear")
	}
	good := AD(sess.PrincipalID, sess.SessionHash, sess.UpstreamID, sess.Generation)
	if _, err := e.svc.Box.Open(sess.Snapshot, good); err != nil {
		t.Fatal(err)
	}
	for name, ad := range map[string][]byte{
		"principal":  AD("pr_other", sess.SessionHash, sess.UpstreamID, sess.Generation),
		"session":    AD(sess.PrincipalID, "other", sess.UpstreamID, sess.Generation),
		"upstream":   AD(sess.PrincipalID, sess.SessionHash, "up_other", sess.Generation),
		"generation": AD(sess.PrincipalID, sess.SessionHash, sess.UpstreamID, sess.Generation+1),
		"version":    bytes.Replace(good, []byte("|v1|"), []byte("|v2|"), 1),
	} {
		if _, err := e.svc.Box.Open(sess.Snapshot, ad); err == nil {
			t.Errorf("the snapshot opens with another %s", name)
		}
	}
	// A snapshot moved to another session row does not open there.
	e.turn(t, strings.Replace(turn1, "You are terse.", "Other system.", 1), endTurn)
	other := e.jobs.last()
	if err := e.st.SetKeepAliveSnapshot(context.Background(), sessionOf(t, other), 1, sess.Snapshot); err != nil {
		t.Fatal(err)
	}
	e.clk.Set(other.RunAt)
	calls := e.prov.calls
	if out := e.run(t, other); out != scheduler.OutcomeSkip || e.refreshes(OutcomeDecryptFailed) != 1 || e.prov.calls != calls {
		t.Fatalf("tampered snapshot: %q, %v, %d calls", out, e.refreshes(OutcomeDecryptFailed), e.prov.calls-calls)
	}
}

// P-KA-4: a newer turn makes the old generation's rows no-ops; a cleared
// configuration stops the session; dispatch errors and unsupported
// upstreams are terminal.
func TestNoOpAndTerminalOutcomes(t *testing.T) {
	e := setup(t)
	e.turn(t, turn1, endTurn)
	old := e.jobs.last()
	e.turn(t, turn2, endTurn)
	if out := e.run(t, old); out != scheduler.OutcomeNoop || e.refreshes(OutcomeStaleGeneration) != 1 || e.prov.calls != 0 {
		t.Fatalf("stale generation: %q", out)
	}
	cur := e.jobs.last()
	e.prov.status = 529
	e.clk.Set(cur.RunAt)
	if out := e.run(t, cur); out != scheduler.OutcomeSkip || e.refreshes(OutcomeDispatchError) != 1 {
		t.Fatalf("dispatch error: %q", out)
	}
	e.prov.status = 0

	// A turn the client continues by itself (a tool call) schedules nothing.
	n := len(e.jobs.got)
	e.turn(t, turn1, `{"stop_reason":"tool_use","content":[{"type":"tool_use","name":"bash","input":{}}]}`)
	if len(e.jobs.got) != n || testutil.ToFloat64(e.svc.Metrics.Tracked.WithLabelValues(OutcomeNotWaiting)) != 1 {
		t.Fatal("a tool turn scheduled a refresh")
	}

	// Cleared configuration (PATCH cache_keepalive null): the session stops.
	e.turn(t, turn1, endTurn)
	next := e.jobs.last()
	if _, err := e.st.PatchPrincipal(context.Background(), e.pr.ID, store.AnyRevision, store.PrincipalPatch{SetCacheKeepalive: true}); err != nil {
		t.Fatal(err)
	}
	if out := e.run(t, next); out != scheduler.OutcomeSkip || e.refreshes(OutcomeDisabled) != 1 {
		t.Fatalf("disabled: %q", out)
	}
}

// The request path only hands the exchange over; a full queue drops it.
func TestObserveNeverBlocks(t *testing.T) {
	e := setup(t)
	e.svc.queueOnce.Do(func() { e.svc.queue = make(chan relay.Exchange, 1) })
	done := make(chan struct{})
	go func() {
		for range 100 {
			e.svc.Observe(relay.Exchange{PrincipalID: e.pr.ID})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Observe blocked")
	}
	if testutil.ToFloat64(e.svc.Metrics.Tracked.WithLabelValues(OutcomeDropped)) != 99 {
		t.Fatal("dropped turns not counted")
	}
}

// A keep-alive refresh sends the upstream's key to its base_url only: an
// upstream redirecting it to another origin (the provider stands for that
// origin here) gets nothing sent there.
func TestRefreshFollowsNoRedirectElsewhere(t *testing.T) {
	e := setup(t)
	home := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, e.upURL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	defer home.Close()
	e.svc.Upstream = func(id string) *snapshot.Upstream {
		return &snapshot.Upstream{ID: id, Kind: store.KindVendorAPIKey, Enabled: true, Credential: "sk-ant-secret", MessagesURL: home.URL + "/v1/messages"}
	}
	e.turn(t, turn1, endTurn)
	first := e.jobs.last()
	e.clk.Set(first.RunAt)
	e.run(t, first)
	e.prov.mu.Lock()
	defer e.prov.mu.Unlock()
	if e.prov.calls != 0 {
		t.Fatalf("%d keep-alive refresh(es) followed the redirect to another origin", e.prov.calls)
	}
}

// Keys are read as JSON defines them, by their exact text, as the provider
// reads them: encoding/json's struct decoding also matches a key in another
// case, so a body could have keep-alive refresh another model, another
// prompt or another lifetime than the one the provider cached.
func TestParsePromptReadsExactKeys(t *testing.T) {
	p, err := ParsePrompt("pr_1", []byte(`{"model":"claude-sonnet-4-5","MODEL":"claude-opus-4-1","max_tokens":5,
"messages":[{"role":"user","content":[{"type":"text","text":"doc","cache_control":{"type":"ephemeral","TTL":"1h"}}],"CONTENT":"other"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if p.Model != "claude-sonnet-4-5" || p.TTL != 5*time.Minute {
		t.Fatalf("model %q ttl %s", p.Model, p.TTL)
	}
	var r struct {
		Model    string `json:"model"`
		Messages []struct {
			Content []map[string]any `json:"content"`
		} `json:"messages"`
	}
	if err := json.Unmarshal(p.Refresh, &r); err != nil || r.Model != "claude-sonnet-4-5" || len(r.Messages) != 1 ||
		len(r.Messages[0].Content) != 1 || r.Messages[0].Content[0]["text"] != "doc" || bytes.Contains(p.Refresh, []byte("opus")) {
		t.Fatalf("refresh %s", p.Refresh)
	}
	// A breakpoint spelt in another case is none.
	if _, err := ParsePrompt("pr_1", []byte(`{"model":"m","max_tokens":5,
"messages":[{"role":"user","content":[{"type":"text","text":"doc","CACHE_CONTROL":{"type":"ephemeral"}},{"type":"text","text":"cache_control"}]}]}`)); err == nil {
		t.Fatal("a block whose cache_control key is in upper case was taken for a breakpoint")
	}
}
