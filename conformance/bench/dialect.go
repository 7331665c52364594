package bench

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/openai"
)

// UpstreamStreamBody is the Messages request the gateway relays for
// StreamBody sent as a Chat Completions request: its translation, which
// marks the prompt for caching. The Messages paths and the direct request
// of the dialect series send these bytes, so the provider gets the same
// request on every path and does the same work for it (a body with a
// cache breakpoint costs the simulator a cache lookup and write that one
// without does not), and what remains between the paths is the gateway's.
func UpstreamStreamBody() (string, error) {
	out, _, err := openai.Translate([]byte(StreamBody))
	if err != nil {
		return "", fmt.Errorf("translate the stream body: %w", err)
	}
	return string(out), nil
}

// Comparison is a section that sets one path against a reference path,
// with a copy of the reference as the noise floor: what each adds to the
// direct request of the same round, interleaved (c=1). Rows hold the
// path in the Gateway slot, the reference in Bare, its copy in Control.
type Comparison struct {
	Title      string // the section's heading
	Label      string // names the section in a missed line
	Path, Ref  string // the column names
	AllWithin  string // the sentence when every row was within noise
	MessageRow string // the metric of non-streaming rows ("" measures none)
	StreamRow  string // of streaming rows ("" measures none)

	N                 int
	Rows              []Row
	Spread            []BlockSpread // one per p99 row
	Messages, Streams [][]Sample    // per target: direct, path, ref, copy
}

// Run measures direct, path, ref and refCopy one request each per round,
// n rounds of each kind the section names after warmup rounds of it.
func (cmp Comparison) Run(ctx context.Context, c *Client, direct, path, ref, refCopy Target, n, warmup int) (Comparison, error) {
	cmp.N = n
	all := []Target{direct, path, ref, refCopy}
	for _, k := range []struct {
		stream bool
		metric string
		into   *[][]Sample
	}{{false, cmp.MessageRow, &cmp.Messages}, {true, cmp.StreamRow, &cmp.Streams}} {
		if k.metric == "" {
			continue
		}
		Logf("%s: warm-up, %d rounds", cmp.Label, warmup)
		if _, err := c.Interleaved(ctx, all, k.stream, warmup); err != nil {
			return cmp, err
		}
		Logf("%s c=1: %d rounds of one request per path (%s), streaming %v", cmp.Label, n, names(all), k.stream)
		s, err := c.Interleaved(ctx, all, k.stream, n)
		if err != nil {
			return cmp, err
		}
		*k.into = s
		cmp.Rows = append(cmp.Rows, addedRow(k.metric+" p50", s, .50, Goal{}), addedRow(k.metric+" p99", s, .99, Goal{}))
		cmp.Spread = append(cmp.Spread, blockSpread(k.metric+" p99", s, .99, SpreadBlocks))
	}
	return cmp, nil
}

// Dialects is the OpenAI-dialect section: what a streaming request
// through /v1/chat/completions adds to the provider's time to first event,
// next to the same request through /v1/messages on the same gateway.
var Dialects = Comparison{
	Title: "OpenAI dialect: time to first chunk against the Messages path, interleaved (c=1)",
	Label: "OpenAI dialect", Path: "openai", Ref: "messages",
	AllWithin: "The OpenAI path was within noise of the Messages path on this run.",
	StreamRow: "added time to first chunk",
}

// RunDialects measures time to first chunk through chat (a Target with
// OpenAI set) against time to first event through messages and control
// (both plain Messages targets on the same gateway).
func RunDialects(ctx context.Context, c *Client, direct, chat, messages, control Target, n, warmup int) (Comparison, error) {
	if !chat.OpenAI || messages.OpenAI || control.OpenAI {
		return Dialects, fmt.Errorf("dialects: want one OpenAI path and two Messages paths")
	}
	body, err := UpstreamStreamBody()
	if err != nil {
		return Dialects, err
	}
	direct.Body, messages.Body, control.Body = body, body, body
	return Dialects.Run(ctx, c, direct, chat, messages, control, n, warmup)
}

// Bedrock is the cloud section: a gateway whose upstream is Bedrock
// against one whose upstream is the provider's own API, on one simulator.
var Bedrock = Comparison{
	Title: "Bedrock upstream against an Anthropic upstream, interleaved (c=1)",
	Label: "Bedrock upstream", Path: "bedrock", Ref: "anthropic",
	AllWithin:  "The Bedrock path was within noise of the Anthropic path on this run.",
	MessageRow: "added latency", StreamRow: "added time to first event",
}

// WithinNoise reports whether the path is no further above the reference
// than the reference and its copy are apart on this run.
func WithinNoise(r Row) bool {
	n := r.Noise()
	if math.IsNaN(n) || n <= 0 {
		return false
	}
	return r.Ratio() <= max(n, 1/n)
}

// Table renders the rows: the added time per path, path ÷ reference with
// whether it is within noise, and the noise floor.
func (cmp Comparison) Table() string {
	var b strings.Builder
	pathsHead(&b, "metric (path − direct)", cmp.Path, cmp.Ref, true)
	for _, r := range cmp.Rows {
		verdict := "within noise"
		if !WithinNoise(r) {
			verdict = "**above noise**"
		}
		fmt.Fprintf(&b, "| %s | %.0f µs | %.0f µs | %.2fx | %s | %.2fx |\n", r.Metric, r.Values[Gateway], r.Values[Bare], r.Ratio(), verdict, r.Noise())
	}
	return b.String()
}

// Missed lists the rows where the path was above the noise floor.
func (cmp Comparison) Missed() []string {
	var out []string
	for _, r := range cmp.Rows {
		if !WithinNoise(r) {
			out = append(out, fmt.Sprintf("%s %s: %s ÷ %s = %.2fx, noise floor %.2fx", cmp.Label, r.Metric, cmp.Path, cmp.Ref, r.Ratio(), r.Noise()))
		}
	}
	return out
}

// Markdown is the section of docs/benchmarks.md.
func (cmp Comparison) Markdown() string {
	var b strings.Builder
	b.WriteString("## " + cmp.Title + "\n\n")
	b.WriteString(cmp.Table())
	writeMissed(&b, cmp.Missed(), cmp.AllWithin)
	for _, sp := range cmp.Spread {
		if len(sp.Gateway) > 0 {
			fmt.Fprintf(&b, "\n%s over %d consecutive blocks of %d rounds: %s ÷ %s %s, %s′ ÷ %s %s.\n", sp.Metric, len(sp.Gateway), cmp.N/len(sp.Gateway),
				cmp.Path, cmp.Ref, spreadRange(sp.Gateway), cmp.Ref, cmp.Ref, spreadRange(sp.Control))
		}
	}
	fmt.Fprintf(&b, "\n%d rounds of each kind, one request per path a round (method: the section's notes).\n", cmp.N)
	return b.String()
}
