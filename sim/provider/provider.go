// Package provider is a deterministic stand-in for Anthropic's Messages API,
// usable in-process (it is an http.Handler) and as the bin/sim binary. It
// speaks only the provider's wire format and knows nothing of the proxy.
//
// Replies are derived from the request: the text echoes the last user
// message, tokens are counted as whitespace-separated words, and max_tokens
// truncates the reply. A control API under /_sim/ records requests, moves
// the clock and injects faults.
package provider

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configures a Provider.
type Options struct {
	// APIKeys are accepted in x-api-key. Empty means DefaultAPIKey.
	APIKeys []string
	// Now is the initial clock; zero means the wall clock.
	Now time.Time
	// MaxRecorded bounds the request log.
	MaxRecorded int
}

// DefaultAPIKey is accepted when no keys are configured.
const DefaultAPIKey = "sk-sim-key"

// Provider is the simulated provider.
type Provider struct {
	keys map[string]bool

	mu       sync.Mutex
	clockOff time.Duration // added to the wall clock
	fixed    *time.Time    // when set, the clock stands still here
	recorded []Recorded
	maxRec   int
	faults   []*Fault
	seq      atomic.Int64
	// catalogVersion is the served price catalog's version (0 means 1).
	catalogVersion int
}

// Recorded is one request as the provider saw it.
type Recorded struct {
	Seq      int64       `json:"seq"`
	At       time.Time   `json:"at"`
	Method   string      `json:"method"`
	Path     string      `json:"path"`
	RawQuery string      `json:"raw_query"`
	Header   http.Header `json:"header"`
	Body     string      `json:"body"`
}

// New returns a Provider.
func New(o Options) *Provider {
	p := &Provider{keys: map[string]bool{}, maxRec: o.MaxRecorded}
	if p.maxRec <= 0 {
		p.maxRec = 10000
	}
	keys := o.APIKeys
	if len(keys) == 0 {
		keys = []string{DefaultAPIKey}
	}
	for _, k := range keys {
		p.keys[k] = true
	}
	if !o.Now.IsZero() {
		t := o.Now
		p.fixed = &t
	}
	return p
}

// Now is the provider's clock.
func (p *Provider) Now() time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fixed != nil {
		return *p.fixed
	}
	return time.Now().Add(p.clockOff)
}

// Requests returns the recorded requests, oldest first.
func (p *Provider) Requests() []Recorded {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Recorded(nil), p.recorded...)
}

func (p *Provider) record(r *http.Request, body []byte) {
	rec := Recorded{Seq: p.seq.Add(1), At: p.Now(), Method: r.Method, Path: r.URL.Path, RawQuery: r.URL.RawQuery,
		Header: r.Header.Clone(), Body: string(body)}
	p.mu.Lock()
	if len(p.recorded) >= p.maxRec {
		p.recorded = append(p.recorded[:0], p.recorded[len(p.recorded)-p.maxRec+1:]...)
	}
	p.recorded = append(p.recorded, rec)
	p.mu.Unlock()
}

func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/_sim/") {
		p.control(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
	if err != nil {
		return
	}
	p.record(r, body)
	w.Header().Set("request-id", fmt.Sprintf("req_sim_%06d", p.seq.Load()))
	f := p.takeFault(r)
	if f != nil && f.apply(w, r) {
		return
	}
	switch r.URL.Path {
	case "/v1/messages":
		p.messages(w, r, body, f)
	case "/v1/messages/count_tokens":
		p.countTokens(w, r, body)
	case "/v1/models":
		p.models(w, r)
	case CatalogPath:
		p.catalog(w, r)
	default:
		apiError(w, http.StatusNotFound, "not_found_error", "Not found: "+r.URL.Path)
	}
}

// apiError writes Anthropic's error shape.
func apiError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]any{"type": "error", "error": map[string]string{"type": typ, "message": msg}})
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(b)
}

// authenticate checks the API key and the version header like the API does.
func (p *Provider) authenticate(w http.ResponseWriter, r *http.Request) bool {
	if k := r.Header.Get("X-Api-Key"); k == "" || !p.keys[k] {
		apiError(w, http.StatusUnauthorized, "authentication_error", "invalid x-api-key")
		return false
	}
	if r.Header.Get("Anthropic-Version") == "" {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "anthropic-version: header is required")
		return false
	}
	return true
}

// request is the subset of a Messages request the sim reads.
type request struct {
	Model     *string         `json:"model"`
	MaxTokens *int            `json:"max_tokens"`
	Messages  []message       `json:"messages"`
	System    json.RawMessage `json:"system"`
	Stream    bool            `json:"stream"`
}

type message struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// text flattens a content value (string or blocks) to its text.
func text(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &blocks) == nil {
		var parts []string
		for _, b := range blocks {
			if b.Text != "" {
				parts = append(parts, b.Text)
			}
		}
		return strings.Join(parts, " ")
	}
	return ""
}

// CountTokens is the sim's tokenizer: whitespace-separated words.
func CountTokens(s string) int { return len(strings.Fields(s)) }

func (req *request) inputTokens() int {
	n := CountTokens(text(req.System))
	for _, m := range req.Messages {
		n += CountTokens(text(m.Content))
	}
	return max(n, 1)
}

func parse(w http.ResponseWriter, body []byte, needMaxTokens bool) (*request, bool) {
	var req request
	if err := json.Unmarshal(body, &req); err != nil {
		apiError(w, http.StatusBadRequest, "invalid_request_error", "request body is not valid JSON: "+err.Error())
		return nil, false
	}
	switch {
	case req.Model == nil || *req.Model == "":
		apiError(w, http.StatusBadRequest, "invalid_request_error", "model: Field required")
	case needMaxTokens && req.MaxTokens == nil:
		apiError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: Field required")
	case needMaxTokens && *req.MaxTokens < 1:
		apiError(w, http.StatusBadRequest, "invalid_request_error", "max_tokens: must be at least 1")
	case req.Messages == nil:
		apiError(w, http.StatusBadRequest, "invalid_request_error", "messages: Field required")
	default:
		return &req, true
	}
	return nil, false
}

func (p *Provider) countTokens(w http.ResponseWriter, r *http.Request, body []byte) {
	if !p.authenticate(w, r) {
		return
	}
	req, ok := parse(w, body, false)
	if !ok {
		return
	}
	w.Header().Set("Content-Type", "application/json")
	fmt.Fprintf(w, `{"input_tokens":%d}`, req.inputTokens())
}

// reply derives the answer: the last user message echoed, cut at max_tokens.
func (req *request) reply() (words []string, stop string) {
	last := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			last = text(req.Messages[i].Content)
			break
		}
	}
	words = strings.Fields(last)
	if len(words) == 0 {
		words = []string{"ok"}
	}
	stop = "end_turn"
	if len(words) > *req.MaxTokens {
		words, stop = words[:*req.MaxTokens], "max_tokens"
	}
	return words, stop
}

func (p *Provider) rateHeaders(w http.ResponseWriter) {
	h := w.Header()
	reset := p.Now().Add(time.Minute).UTC().Format(time.RFC3339)
	h.Set("anthropic-ratelimit-requests-limit", "1000")
	h.Set("anthropic-ratelimit-requests-remaining", "999")
	h.Set("anthropic-ratelimit-requests-reset", reset)
	h.Set("anthropic-ratelimit-tokens-limit", "1000000")
	h.Set("anthropic-ratelimit-tokens-remaining", "999000")
	h.Set("anthropic-ratelimit-tokens-reset", reset)
}

func (p *Provider) messages(w http.ResponseWriter, r *http.Request, body []byte, f *Fault) {
	if !p.authenticate(w, r) {
		return
	}
	req, ok := parse(w, body, true)
	if !ok {
		return
	}
	p.rateHeaders(w)
	words, stop := req.reply()
	id := fmt.Sprintf("msg_sim_%06d", p.seq.Load())
	in := req.inputTokens()
	usage := map[string]any{"input_tokens": in, "output_tokens": len(words), "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{
			"id": id, "type": "message", "role": "assistant", "model": *req.Model,
			"content":     []any{map[string]any{"type": "text", "text": strings.Join(words, " ")}},
			"stop_reason": stop, "stop_sequence": nil, "usage": usage,
		})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl, _ := w.(http.Flusher)
	n := 0
	send := func(event string, data any) bool {
		if f != nil && f.DropAfterEvents > 0 && n == f.DropAfterEvents {
			hijackClose(w)
			return false
		}
		if n == 1 && f != nil && f.FirstEventDelayMS > 0 {
			time.Sleep(time.Duration(f.FirstEventDelayMS) * time.Millisecond)
		}
		b := typeFirst(data)
		var buf bytes.Buffer
		buf.WriteString("event: " + event + "\ndata: ")
		buf.Write(b)
		buf.WriteString("\n\n")
		if _, err := w.Write(buf.Bytes()); err != nil {
			return false
		}
		if fl != nil {
			fl.Flush()
		}
		n++
		return true
	}
	startUsage := map[string]any{"input_tokens": in, "output_tokens": 1, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
	if !send("message_start", map[string]any{"type": "message_start", "message": map[string]any{
		"id": id, "type": "message", "role": "assistant", "model": *req.Model, "content": []any{},
		"stop_reason": nil, "stop_sequence": nil, "usage": startUsage}}) {
		return
	}
	if !send("content_block_start", map[string]any{"type": "content_block_start", "index": 0, "content_block": map[string]any{"type": "text", "text": ""}}) {
		return
	}
	if !send("ping", map[string]any{"type": "ping"}) {
		return
	}
	for i, word := range words {
		if i > 0 {
			word = " " + word
		}
		if !send("content_block_delta", map[string]any{"type": "content_block_delta", "index": 0, "delta": map[string]any{"type": "text_delta", "text": word}}) {
			return
		}
	}
	if !send("content_block_stop", map[string]any{"type": "content_block_stop", "index": 0}) {
		return
	}
	if !send("message_delta", map[string]any{"type": "message_delta", "delta": map[string]any{"stop_reason": stop, "stop_sequence": nil},
		"usage": map[string]any{"output_tokens": len(words)}}) {
		return
	}
	send("message_stop", map[string]any{"type": "message_stop"})
}

// typeFirst encodes an event object with "type" as its first key, as the
// real API does (clients and proxies may rely on it to classify events cheaply).
func typeFirst(v any) []byte {
	m, ok := v.(map[string]any)
	if !ok {
		b, _ := json.Marshal(v)
		return b
	}
	rest := make(map[string]any, len(m))
	for k, val := range m {
		if k != "type" {
			rest[k] = val
		}
	}
	t, _ := json.Marshal(m["type"])
	b, _ := json.Marshal(rest)
	out := append([]byte(`{"type":`), t...)
	if len(b) > 2 {
		out = append(out, ',')
		out = append(out, b[1:]...)
	} else {
		out = append(out, '}')
	}
	return out
}

// hijackClose drops the connection without a proper end of response.
func hijackClose(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if c, _, err := hj.Hijack(); err == nil {
			c.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}
