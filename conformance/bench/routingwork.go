package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/sim/provider"
)

// RoutingWorkload is a Claude-Code-shaped load (issue 33): Sessions
// sessions, Parallel at a time, each Turns requests with a growing prompt
// (a shared system prompt and the conversation so far, cache breakpoints
// on both), and every FanOutEvery-th turn fanning out FanOut parallel
// subagent requests of the same session.
type RoutingWorkload struct {
	Sessions, Parallel, Turns, FanOutEvery, FanOut int
}

// DefaultRoutingWorkload is what make bench runs.
var DefaultRoutingWorkload = RoutingWorkload{Sessions: 48, Parallel: 12, Turns: 6, FanOutEvery: 3, FanOut: 6}

// RoutingMode is one way of routing the workload.
type RoutingMode struct {
	Name string
	// Workload, when set, replaces the run's workload for this mode.
	Workload *RoutingWorkload
	// Weights of the accounts (0: standby); Limits their requests per
	// minute (enforced by the sims).
	Weights, Limits []int
	// Affinity: requests carry Claude Code's session header and the proxy
	// keeps sessions on their account.
	Affinity bool
	// MaxInFlight caps the principal (0: none); Queue lets requests past
	// it wait (else they are refused).
	MaxInFlight int
	Queue       bool
}

// RoutingResult is what one mode's run measured.
type RoutingResult struct {
	Mode     RoutingMode
	Requests int // client requests
	// Client answers.
	OK, Client429 int
	// Prompt tokens of the successful answers: read from the cache, and
	// all (read, written, plain).
	CacheRead, PromptTokens int
	// FollowUps are requests of a session after its first; SameAccount
	// those served by the account that served the session's previous one.
	FollowUps, SameAccount int
	// Served per account (successful answers), 429s the accounts answered
	// (those sent before the proxy knew: in flight when the first came
	// back), and requests sent to an account the proxy's board said was
	// cooling down at dispatch.
	Served, Account429 []int
	ToCooling          int
	Took               time.Duration
	Workload           RoutingWorkload
}

// CacheShare is the share of prompt tokens read from the cache.
func (r RoutingResult) CacheShare() float64 {
	if r.PromptTokens == 0 {
		return 0
	}
	return float64(r.CacheRead) / float64(r.PromptTokens)
}

// SameShare is the share of follow-ups served where the previous was.
func (r RoutingResult) SameShare() float64 {
	if r.FollowUps == 0 {
		return 0
	}
	return float64(r.SameAccount) / float64(r.FollowUps)
}

// routingTransport sends each upstream request to its account's sim in
// memory and notes who served what.
type routingTransport struct {
	sims  map[string]http.Handler // host → sim
	ids   map[string]string       // host → upstream id
	board *routing.Board

	mu        sync.Mutex
	last      map[string]string // session → host of its last success
	follow    int
	same      int
	got429    map[string]int
	cacheRd   int
	prompt    int
	served    map[string]int
	toCooling int
}

func (t *routingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	// Sent to an account the proxy already knew was cooling down?
	_, cooling := t.board.CoolingUntil(t.ids[r.URL.Host], time.Now())
	rec := httptest.NewRecorder()
	t.sims[r.URL.Host].ServeHTTP(rec, r)
	res := rec.Result()
	res.Request = r
	sess := r.Header.Get("X-Bench-Session")
	t.mu.Lock()
	defer t.mu.Unlock()
	if cooling {
		t.toCooling++
	}
	switch res.StatusCode {
	case http.StatusOK:
		t.served[r.URL.Host]++
		var m struct {
			Usage struct {
				In    int `json:"input_tokens"`
				Read  int `json:"cache_read_input_tokens"`
				Write int `json:"cache_creation_input_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal(rec.Body.Bytes(), &m) == nil {
			t.cacheRd += m.Usage.Read
			t.prompt += m.Usage.In + m.Usage.Read + m.Usage.Write
		}
		if prev, ok := t.last[sess]; ok {
			t.follow++
			if prev == r.URL.Host {
				t.same++
			}
		}
		t.last[sess] = r.URL.Host
	case http.StatusTooManyRequests:
		t.got429[r.URL.Host]++
	}
	return res, nil
}

type routingSource struct{ s *snapshot.Snapshot }

func (f routingSource) Current() *snapshot.Snapshot { return f.s }

// RunRouting runs w through an in-process proxy (relay.Handler with the
// board, session table and admission as the server wires them) in front
// of one simulated account per weight, and measures it.
func RunRouting(ctx context.Context, w RoutingWorkload, m RoutingMode) (RoutingResult, error) {
	tr := &routingTransport{sims: map[string]http.Handler{}, ids: map[string]string{}, last: map[string]string{}, got429: map[string]int{},
		served: map[string]int{}, board: routing.NewBoard(nil)}
	key := sha256.Sum256([]byte("sk-bench"))
	builtin := store.BuiltinSubscriptionPreference
	cfg := &store.Config{Generation: 1,
		Principals: []store.Principal{{ID: "pr_bench", Name: "bench", Kind: "machine", Enabled: true, AllowedModels: []string{"*"}, MaxInFlight: m.MaxInFlight}},
		Keys:       []store.Key{{ID: "key_bench", PrincipalID: "pr_bench", Hash: key[:]}},
		Chains:     []store.ChainEntry{{ID: "ce_builtin", PrincipalID: "pr_bench", Slot: store.SlotRouter, Builtin: &builtin, Enabled: true}},
	}
	hosts := make([]string, len(m.Weights))
	for i, wt := range m.Weights {
		hosts[i] = fmt.Sprintf("account-%d.invalid", i)
		tr.sims[hosts[i]] = provider.New(provider.Options{APIKeys: []string{"sk-acct"}, MaxRecorded: -1,
			RequestsPerMinute: m.Limits[i], EnforceRequestsPerMinute: true})
		tr.ids[hosts[i]] = fmt.Sprintf("up_%d", i)
		cfg.Upstreams = append(cfg.Upstreams, store.Upstream{ID: fmt.Sprintf("up_%d", i), Name: hosts[i], Kind: store.KindVendorAPIKey,
			BaseURL: "http://" + hosts[i], Enabled: true, Credential: []byte("sk-acct"), CredentialKind: "api_key", Weight: wt})
	}
	o := relay.Options{Source: routingSource{snapshot.Build(cfg, plainOpener{}, time.Now())}, Transport: tr, Recorder: discardUsage{},
		Board: tr.board}
	if m.Affinity {
		o.Affinity = affinity.NewTable()
	}
	ql := -1
	if m.Queue {
		ql = 0 // the default length
	}
	o.Admission = admission.New(admission.Options{QueueLength: ql})
	h := relay.New(o)

	if m.Workload != nil {
		w = *m.Workload
	}
	res := RoutingResult{Mode: m, Workload: w}
	var mu sync.Mutex
	send := func(sess, body string) {
		req := httptest.NewRequest("POST", "/v1/messages", strings.NewReader(body))
		req = req.WithContext(ctx)
		req.Header.Set("x-api-key", "sk-bench")
		req.Header.Set("anthropic-version", "2023-06-01")
		req.Header.Set("X-Bench-Session", sess) // passed through: the transport's bookkeeping
		if m.Affinity {
			req.Header.Set(affinity.SessionHeader, sess)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		mu.Lock()
		res.Requests++
		switch rec.Code {
		case http.StatusOK:
			res.OK++
		case http.StatusTooManyRequests:
			res.Client429++
		}
		mu.Unlock()
	}
	system := strings.Repeat("You are a careful coding agent working in a large repository. ", 60)
	start := time.Now()
	sessions := make(chan int)
	var wg sync.WaitGroup
	for range w.Parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for s := range sessions {
				sess := fmt.Sprintf("sess-%04d", s)
				var convo []string
				for turn := 1; turn <= w.Turns; turn++ {
					convo = append(convo, fmt.Sprintf("Turn %d of session %d: read the files, change the code, run the tests. %s", turn, s,
						strings.Repeat("Output of the tool call follows. ", 40)))
					send(sess, messagesBody(system, convo))
					if w.FanOutEvery > 0 && turn%w.FanOutEvery == 0 {
						var fan sync.WaitGroup
						for j := range w.FanOut {
							fan.Add(1)
							go func() {
								defer fan.Done()
								send(sess, messagesBody(system, append(convo[:len(convo):len(convo)], fmt.Sprintf("Subagent %d: search the code base.", j))))
							}()
						}
						fan.Wait()
					}
				}
			}
		}()
	}
	for s := range w.Sessions {
		sessions <- s
	}
	close(sessions)
	wg.Wait()
	res.Took = time.Since(start)
	tr.mu.Lock()
	defer tr.mu.Unlock()
	res.CacheRead, res.PromptTokens, res.FollowUps, res.SameAccount = tr.cacheRd, tr.prompt, tr.follow, tr.same
	for _, host := range hosts {
		res.Served = append(res.Served, tr.served[host])
		res.Account429 = append(res.Account429, tr.got429[host])
	}
	res.ToCooling = tr.toCooling
	return res, nil
}

// messagesBody is a Messages request of the conversation so far, with
// cache breakpoints on the system prompt and on the last two messages.
func messagesBody(system string, convo []string) string {
	var b bytes.Buffer
	fmt.Fprintf(&b, `{"model":"claude-sonnet-4-5","max_tokens":16,"system":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}],"messages":[`, system)
	for i, c := range convo {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		if i > 0 {
			b.WriteByte(',')
		}
		// Breakpoints on the last two messages, as Claude Code sets them:
		// the earlier one marks where the previous request's last was, so
		// a follow-up reads the conversation so far. Blocks in both cases:
		// a breakpoint moving on leaves the prefix it marked the same.
		if i >= len(convo)-2 {
			fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":%q,"cache_control":{"type":"ephemeral"}}]}`, role, c)
		} else {
			fmt.Fprintf(&b, `{"role":%q,"content":[{"type":"text","text":%q}]}`, role, c)
		}
	}
	b.WriteString("]}")
	return b.String()
}

// Evenness is the largest deviation of served counts from their
// weight-proportional share, as a fraction of that share.
func Evenness(served, weights []int) float64 {
	total, wsum := 0, 0
	for i, n := range served {
		total += n
		wsum += weights[i]
	}
	worst := 0.0
	for i, n := range served {
		if weights[i] == 0 {
			continue
		}
		want := float64(total) * float64(weights[i]) / float64(wsum)
		worst = math.Max(worst, math.Abs(float64(n)-want)/want)
	}
	return worst
}

// RoutingMarkdown is the table of results.
func RoutingMarkdown(w RoutingWorkload, rs []RoutingResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Workload (unless the mode says otherwise): %d sessions (%d at a time) of %d turns, every %d turns a fan-out of %d parallel "+
		"subagent requests of the same session; %d client requests per run. Accounts answer 429 past their per-minute limit (the sim enforces it).\n\n",
		w.Sessions, w.Parallel, w.Turns, w.FanOutEvery, w.FanOut, rs[0].Requests)
	b.WriteString("| Mode | Weights | Limits (req/min) | Requests | Cache read share | Follow-ups on the same account | Served per account | Spread vs weights | 429s from accounts | Sent to a cooling account | Client 429s |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		name := r.Mode.Name
		if r.Mode.Workload != nil {
			name += fmt.Sprintf(" (%d sessions of %d turns)", r.Workload.Sessions, r.Workload.Turns)
		}
		fmt.Fprintf(&b, "| %s | %v | %v | %d | %.1f %% | %.1f %% | %v | ±%.1f %% | %v | %d | %d |\n", name, r.Mode.Weights, r.Mode.Limits, r.Requests,
			100*r.CacheShare(), 100*r.SameShare(), r.Served, 100*Evenness(r.Served, r.Mode.Weights), r.Account429, r.ToCooling, r.Client429)
	}
	return b.String()
}
