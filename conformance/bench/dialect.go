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

// DialectReport is the OpenAI-dialect section: what a streaming request
// through /v1/chat/completions adds to the provider's time to first event,
// next to the same request through /v1/messages on the same gateway, with
// a second Messages path as the noise floor.
type DialectReport struct {
	N      int
	Rows   []Row       // Values: OpenAI (the Gateway slot), Messages (Bare), Messages′ (Control)
	Spread BlockSpread // the p99 row per consecutive block of rounds
	// Streams are the samples per target as passed to RunDialects, the
	// direct path first.
	Streams [][]Sample
}

// RunDialects measures time to first chunk through chat (a Target with
// OpenAI set) against time to first event through messages and control
// (both plain Messages targets on the same gateway), interleaved one
// streaming request per path with direct (the provider) each round, after
// warmup rounds.
func RunDialects(ctx context.Context, c *Client, direct, chat, messages, control Target, n, warmup int, logf func(string, ...any)) (DialectReport, error) {
	rep := DialectReport{N: n}
	if !chat.OpenAI || messages.OpenAI || control.OpenAI {
		return rep, fmt.Errorf("dialects: want one OpenAI path and two Messages paths")
	}
	body, err := UpstreamStreamBody()
	if err != nil {
		return rep, err
	}
	direct.Body, messages.Body, control.Body = body, body, body
	all := []Target{direct, chat, messages, control}
	logf("dialects: warm-up, %d rounds", warmup)
	if _, err := c.Interleaved(ctx, all, true, warmup); err != nil {
		return rep, err
	}
	logf("dialects c=1: %d rounds of one streaming request per path (%s)", n, names(all))
	if rep.Streams, err = c.Interleaved(ctx, all, true, n); err != nil {
		return rep, err
	}
	rep.Rows = []Row{
		addedRow("added time to first chunk p50", rep.Streams, .50, Goal{}),
		addedRow("added time to first chunk p99", rep.Streams, .99, Goal{}),
	}
	rep.Spread = blockSpread(rep.Rows[1].Metric, rep.Streams, .99, SpreadBlocks)
	return rep, nil
}

// WithinNoise reports whether the OpenAI path is no further above the
// Messages path than the two identical Messages paths are apart on this
// run.
func WithinNoise(r Row) bool {
	n := r.Noise()
	if math.IsNaN(n) || n <= 0 {
		return false
	}
	return r.Ratio() <= max(n, 1/n)
}

// Table renders the rows: the added time per path, openai ÷ messages with
// whether it is within noise, and the noise floor.
func (rep DialectReport) Table() string {
	var b strings.Builder
	pathsHead(&b, "metric (path − direct)", "openai", "messages", true)
	for _, r := range rep.Rows {
		verdict := "within noise"
		if !WithinNoise(r) {
			verdict = "**above noise**"
		}
		fmt.Fprintf(&b, "| %s | %.0f µs | %.0f µs | %.2fx | %s | %.2fx |\n", r.Metric, r.Values[Gateway], r.Values[Bare], r.Ratio(), verdict, r.Noise())
	}
	return b.String()
}

// Missed lists the rows where the OpenAI path was above the noise floor.
func (rep DialectReport) Missed() []string {
	var out []string
	for _, r := range rep.Rows {
		if !WithinNoise(r) {
			out = append(out, fmt.Sprintf("OpenAI dialect %s: openai ÷ messages = %.2fx, noise floor %.2fx", r.Metric, r.Ratio(), r.Noise()))
		}
	}
	return out
}

// Markdown is the OpenAI-dialect section of docs/benchmarks.md.
func (rep DialectReport) Markdown() string {
	var b strings.Builder
	b.WriteString("## OpenAI dialect: time to first chunk against the Messages path, interleaved (c=1)\n\n")
	b.WriteString(rep.Table())
	writeMissed(&b, rep.Missed(), "The OpenAI path was within noise of the Messages path on this run.")
	if len(rep.Spread.Gateway) > 0 {
		fmt.Fprintf(&b, "\n%s over %d consecutive blocks of %d rounds: openai ÷ messages %s, messages′ ÷ messages %s.\n",
			rep.Spread.Metric, len(rep.Spread.Gateway), rep.N/len(rep.Spread.Gateway), spreadRange(rep.Spread.Gateway), spreadRange(rep.Spread.Control))
	}
	fmt.Fprintf(&b, `
Method. The same simulator and gateway as above. %d rounds; each sends one streaming request to every
path in turn (direct to the provider, then through the gateway as /v1/chat/completions ("openai"),
as /v1/messages ("messages") and as /v1/messages again ("messages′")), starting one path later each
round. The provider gets the same bytes on every path: the OpenAI path sends the bench's stream body
as a Chat Completions request, and the direct request and both Messages paths send its translation
(bench.UpstreamStreamBody), which carries the cache breakpoint the translation places. Time to first
chunk is to the end of the first server-sent event: the first chat.completion.chunk on the OpenAI path,
message_start on the others; every stream is still read to its end and checked ([DONE] or message_stop). Figures are,
round by round, the path's time minus the direct request's. "Within noise" means openai ÷ messages is
no larger than the farther of messages′ ÷ messages and its inverse: the OpenAI path is no further
above the Messages path than two identical Messages paths are apart on the same run.
`, rep.N)
	return b.String()
}
