package bench

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/usage"
)

// RouterCostGoal is the target of issue 22: a one-plugin chain costs the
// proxy path at most 5% over the built-in router.
const RouterCostGoal = 1.05

// RouterCostResult is the proxy path's latency with the built-in router
// and with a one-plugin chain, measured in turns in one process, with a
// control: a second built-in path, identical to the first, in the same
// rotation (its ratio to the first is the noise floor of the run).
type RouterCostResult struct {
	N                        int
	OverHTTP                 bool
	Builtin, Control, Plugin []time.Duration
	PluginDesc, Config       string
	// Metered: the plugin ran metered (plugins/fuel), not under wazero's
	// termination checks.
	Metered bool
}

// routerCostBlocks is how many consecutive blocks the kept requests are
// cut into for the spread of the p50 ratio.
const routerCostBlocks = 10

// RouterCost sends n requests through each of three in-process proxy
// paths (relay.Handler on an in-memory snapshot and provider): two whose
// principal has the built-in router (the second is the control), one whose
// chain adds the router plugin wasm with config. Each round sends one
// request through each, the order rotating from round to round, so load on
// the machine and a path's place in the round fall on all three alike.
// overHTTP sends them through a loopback listener each with a keep-alive
// client instead of calling ServeHTTP directly.
func RouterCost(ctx context.Context, wasm []byte, config string, n int, overHTTP bool) (RouterCostResult, error) {
	rt, err := plugins.New(ctx, plugins.Options{CallTimeout: 5 * time.Second})
	if err != nil {
		return RouterCostResult{}, err
	}
	defer rt.Close(ctx)
	digest, _, err := rt.Compile(ctx, wasm)
	if err != nil {
		return RouterCostResult{}, err
	}
	paths := []http.Handler{routerCostHandler(rt, nil, ""), routerCostHandler(rt, nil, ""),
		routerCostHandler(rt, &store.RegistryEntry{ID: "wasm_bench", Name: "bench", Digest: digest, Slots: []string{"router"}}, config)}
	body := []byte(`{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello"}]}`)
	if overHTTP {
		for i, h := range paths {
			l := loopback(h, body)
			defer l.close()
			paths[i] = l
		}
	}
	once := func(h http.Handler) (time.Duration, error) {
		req := httptest.NewRequest("POST", "/v1/messages", bytes.NewReader(body))
		req.Header.Set("x-api-key", "sk-bench")
		req.Header.Set("anthropic-version", "2023-06-01")
		w := httptest.NewRecorder()
		start := time.Now()
		h.ServeHTTP(w, req)
		d := time.Since(start)
		if w.Code != 200 {
			return 0, fmt.Errorf("status %d: %s", w.Code, w.Body.String())
		}
		return d, nil
	}
	res := RouterCostResult{N: n, OverHTTP: overHTTP, Config: config, PluginDesc: fmt.Sprintf("%d KB module", len(wasm)>>10),
		Metered: rt.Metered(digest)}
	kept := [3]*[]time.Duration{&res.Builtin, &res.Control, &res.Plugin}
	for i := range n + n/10 { // the first tenth warms up and is not kept
		for k := range paths {
			j := (i + k) % len(paths)
			d, err := once(paths[j])
			if err != nil {
				return res, err
			}
			if i >= n/10 {
				*kept[j] = append(*kept[j], d)
			}
		}
	}
	return res, nil
}

func routerCostHandler(rt *plugins.Runtime, reg *store.RegistryEntry, config string) http.Handler {
	h := sha256.Sum256([]byte("sk-bench"))
	builtin := store.BuiltinSubscriptionPreference
	cfg := &store.Config{Generation: 1,
		Upstreams: []store.Upstream{{ID: "up_1", Name: "main", Kind: store.KindVendorAPIKey, BaseURL: "http://provider.invalid",
			Enabled: true, Credential: []byte("sk-upstream"), CredentialKind: "api_key"}},
		Principals: []store.Principal{{ID: "pr_bench", Name: "bench", Kind: "machine", Enabled: true, AllowedModels: []string{"*"}}},
		Keys:       []store.Key{{ID: "key_bench", PrincipalID: "pr_bench", Hash: h[:]}},
		Chains:     []store.ChainEntry{{ID: "ce_builtin", PrincipalID: "pr_bench", Slot: store.SlotRouter, Builtin: &builtin, Enabled: true}},
	}
	if reg != nil {
		cfg.Plugins = []store.RegistryEntry{*reg}
		cfg.Chains = append(cfg.Chains, store.ChainEntry{ID: "ce_plugin", PrincipalID: "pr_bench", Slot: store.SlotRouter,
			WasmRegistryID: &reg.ID, Config: []byte(config), Position: 10, Enabled: true})
	}
	return relay.New(relay.Options{Source: fixedSource{snapshot.Build(cfg, plainOpener{}, time.Now())},
		Transport: cannedMessage{}, Recorder: discardUsage{}, Plugins: rt})
}

// loopbackClient serves a handler on a loopback listener; its ServeHTTP
// sends the request there over a kept-alive connection and copies the
// answer back, so the measured time includes a real HTTP exchange.
type loopbackClient struct {
	srv  *httptest.Server
	c    *http.Client
	body []byte
}

func loopback(h http.Handler, body []byte) *loopbackClient {
	srv := httptest.NewServer(h)
	return &loopbackClient{srv: srv, c: srv.Client(), body: body}
}

func (l *loopbackClient) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, _ := http.NewRequest("POST", l.srv.URL+"/v1/messages", bytes.NewReader(l.body))
	req.Header = r.Header
	res, err := l.c.Do(req)
	if err != nil {
		w.WriteHeader(599)
		_, _ = io.WriteString(w, err.Error())
		return
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	w.WriteHeader(res.StatusCode)
	w.Write(b)
}

func (l *loopbackClient) close() { l.srv.Close() }

var _ http.Handler = (*loopbackClient)(nil)

type fixedSource struct{ s *snapshot.Snapshot }

func (f fixedSource) Current() *snapshot.Snapshot { return f.s }

type plainOpener struct{}

func (plainOpener) Open(ct, _ []byte) ([]byte, error) { return ct, nil }

type discardUsage struct{}

func (discardUsage) Record(p usage.Pending) {
	if p.Release != nil {
		p.Release()
	}
}

// cannedMessage is a provider answering a small message in memory.
type cannedMessage struct{}

var cannedBody = []byte(`{"id":"msg_1","type":"message","content":[{"type":"text","text":"hi"}],"usage":{"input_tokens":5,"output_tokens":2}}`)

func (cannedMessage) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body) // a canned answer, whatever was sent
	r.Body.Close()
	h := http.Header{"Content-Type": {"application/json"}}
	return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(cannedBody)), ContentLength: int64(len(cannedBody)), Request: r}, nil
}

// Markdown renders the comparison: p50 and p99 of each path, the plugin's
// ratio to the built-in against the goal, the control's ratio (the noise
// floor) and the spread of the p50 ratios over consecutive blocks. A ratio
// over the goal by no more than the noise floor's distance from 1 is
// "within noise": this run cannot tell it from met.
func (r RouterCostResult) Markdown() string {
	var b strings.Builder
	path := "ServeHTTP, no network"
	if r.OverHTTP {
		path = "HTTP over loopback"
	}
	b.WriteString("| path | percentile | built-in router (µs) | one-plugin chain (µs) | plugin ÷ built-in | target | | noise floor: built-in′ ÷ built-in |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---|---:|\n")
	for _, p := range []struct {
		name string
		q    float64
	}{{"p50", 0.50}, {"p99", 0.99}} {
		a, c := Percentile(r.Builtin, p.q), Percentile(r.Plugin, p.q)
		ratio, floor := float64(c)/float64(a), float64(Percentile(r.Control, p.q))/float64(a)
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %.2fx | <= %.2fx | %s | %.2fx |\n", path, p.name, Micros(a), Micros(c), ratio, RouterCostGoal,
			routerCostVerdict(ratio, floor), floor)
	}
	how := "under wazero's termination checks"
	if r.Metered {
		how = "metered"
	}
	fmt.Fprintf(&b, "\n%d requests each, in rounds of one through each path (built-in, plugin, and a second built-in as the control), "+
		"the order rotating; the plugin is the sample pin router (%s, run %s) with config `%s`.",
		r.N, r.PluginDesc, how, r.Config)
	over := func(x []time.Duration) func(lo, hi int) float64 {
		return func(lo, hi int) float64 {
			return float64(Percentile(x[lo:hi], .5)) / float64(Percentile(r.Builtin[lo:hi], .5))
		}
	}
	if pl := blockRatios(len(r.Builtin), routerCostBlocks, over(r.Plugin)); pl != nil {
		fmt.Fprintf(&b, " p50 ratio over %d consecutive blocks: plugin ÷ built-in %s, built-in′ ÷ built-in %s.",
			routerCostBlocks, spreadRange(pl), spreadRange(blockRatios(len(r.Builtin), routerCostBlocks, over(r.Control))))
	}
	b.WriteString("\n")
	return b.String()
}

// routerCostVerdict: met, within noise (over the goal by no more than the
// floor is from 1), or missed.
func routerCostVerdict(ratio, floor float64) string {
	switch {
	case ratio <= RouterCostGoal:
		return "met"
	case ratio <= RouterCostGoal+math.Abs(floor-1):
		return "within noise"
	}
	return "**missed**"
}
