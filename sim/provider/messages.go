package provider

import (
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"unicode"
)

// request is the subset of a Messages request the sim reads.
type request struct {
	Model     *string   `json:"model"`
	MaxTokens *int      `json:"max_tokens"`
	Messages  []message `json:"messages"`
	System    content   `json:"system"`
	Stream    bool      `json:"stream"`
	Tools     []struct {
		Name string `json:"name"`
	} `json:"tools"`
	ToolChoice *struct {
		Type string `json:"type"`
		Name string `json:"name"`
	} `json:"tool_choice"`
}

// forcedTool is the tool the request makes the model call: tool_choice
// "tool" names it, "any" means the first tool; "" when none is forced.
func (req *request) forcedTool() string {
	tc := req.ToolChoice
	switch {
	case tc == nil || len(req.Tools) == 0:
		return ""
	case tc.Type == "tool":
		return tc.Name
	case tc.Type == "any":
		return req.Tools[0].Name
	}
	return ""
}

type message struct {
	Role    string  `json:"role"`
	Content content `json:"content"`
}

// content is a string or a list of blocks, flattened to its text as it is
// decoded; non-text blocks (images, tool calls) contribute nothing.
type content struct{ text string }

func (c *content) UnmarshalJSON(b []byte) error {
	switch {
	case len(b) == 0 || string(b) == "null":
		c.text = ""
		return nil
	case b[0] == '"':
		return json.Unmarshal(b, &c.text)
	case b[0] == '[':
		var blocks []struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(b, &blocks); err != nil {
			return err
		}
		var sb strings.Builder
		for _, bl := range blocks {
			if bl.Text == "" {
				continue
			}
			if sb.Len() > 0 {
				sb.WriteByte(' ')
			}
			sb.WriteString(bl.Text)
		}
		c.text = sb.String()
		return nil
	}
	return errors.New("content must be a string or a list of content blocks")
}

// CountTokens is the sim's tokenizer: the number of whitespace-separated
// words in s.
func CountTokens(s string) int {
	n, inWord := 0, false
	for _, r := range s {
		if unicode.IsSpace(r) {
			inWord = false
		} else if !inWord {
			inWord, n = true, n+1
		}
	}
	return n
}

// firstWords returns up to n words of s and whether s had more.
func firstWords(s string, n int) (words []string, truncated bool) {
	for len(s) > 0 {
		s = strings.TrimLeftFunc(s, unicode.IsSpace)
		if s == "" {
			break
		}
		if len(words) == n {
			return words, true
		}
		end := strings.IndexFunc(s, unicode.IsSpace)
		if end < 0 {
			end = len(s)
		}
		words = append(words, s[:end])
		s = s[end:]
	}
	return words, false
}

// inputTokens counts the system prompt and every message; never below one,
// as no real request is free.
func (req *request) inputTokens() int {
	n := CountTokens(req.System.text)
	for _, m := range req.Messages {
		n += CountTokens(m.Content.text)
	}
	return max(n, 1)
}

// reply derives the answer: the last user message echoed word by word ("ok"
// when it has no text), cut at max_tokens.
func (req *request) reply() (words []string, stop string) {
	last := ""
	for i := len(req.Messages) - 1; i >= 0; i-- {
		if req.Messages[i].Role == "user" {
			last = req.Messages[i].Content.text
			break
		}
	}
	if CountTokens(last) == 0 {
		last = "ok"
	}
	words, truncated := firstWords(last, *req.MaxTokens)
	if truncated {
		return words, "max_tokens"
	}
	return words, "end_turn"
}

// parse decodes and validates a request the way the real API reports
// problems: one invalid_request_error naming the field.
func parse(w http.ResponseWriter, body []byte, needMaxTokens bool) (*request, bool) {
	var req request
	fail := func(msg string) (*request, bool) {
		apiError(w, http.StatusBadRequest, "invalid_request_error", msg)
		return nil, false
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return fail("request body is not valid JSON: " + err.Error())
	}
	switch {
	case req.Model == nil || *req.Model == "":
		return fail("model: Field required")
	case needMaxTokens && req.MaxTokens == nil:
		return fail("max_tokens: Field required")
	case needMaxTokens && *req.MaxTokens < 1:
		return fail("max_tokens: Input should be greater than or equal to 1")
	case req.Messages == nil:
		return fail("messages: Field required")
	}
	for i, m := range req.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			return fail("messages." + strconv.Itoa(i) + ".role: Input should be 'user' or 'assistant'")
		}
	}
	return &req, true
}

func (p *Provider) countTokens(w http.ResponseWriter, r *http.Request, body []byte) {
	if _, ok := p.authenticate(w, r); !ok {
		return
	}
	req, ok := parse(w, body, false)
	if !ok {
		return
	}
	b := strconv.AppendInt([]byte(`{"input_tokens":`), int64(req.inputTokens()), 10)
	b = append(b, '}')
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.Write(b)
}

// Wire shapes, field order as the real API sends them.
type (
	messageBody struct {
		ID           string  `json:"id"`
		Type         string  `json:"type"`
		Role         string  `json:"role"`
		Model        string  `json:"model"`
		Content      []any   `json:"content"` // textBlock or toolUseBlock
		StopReason   *string `json:"stop_reason"`
		StopSequence *string `json:"stop_sequence"`
		Usage        usage   `json:"usage"`
	}
	textBlock struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	toolUseBlock struct {
		Type  string          `json:"type"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	usage struct {
		InputTokens              int            `json:"input_tokens"`
		CacheCreationInputTokens int            `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int            `json:"cache_read_input_tokens"`
		CacheCreation            *cacheCreation `json:"cache_creation,omitempty"`
		OutputTokens             int            `json:"output_tokens"`
	}
	cacheCreation struct {
		Ephemeral5m int `json:"ephemeral_5m_input_tokens"`
		Ephemeral1h int `json:"ephemeral_1h_input_tokens"`
	}
	messageStartEvent struct {
		Type    string      `json:"type"`
		Message messageBody `json:"message"`
	}
	messageDeltaEvent struct {
		Type  string `json:"type"`
		Delta struct {
			StopReason   string  `json:"stop_reason"`
			StopSequence *string `json:"stop_sequence"`
		} `json:"delta"`
		Usage struct {
			OutputTokens int `json:"output_tokens"`
		} `json:"usage"`
	}
)

// Events whose bytes never change.
var (
	blockStartData = []byte(`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`)
	pingData       = []byte(`{"type": "ping"}`)
	blockStopData  = []byte(`{"type":"content_block_stop","index":0}`)
	messageStop    = []byte(`{"type":"message_stop"}`)
)

func (p *Provider) messages(w http.ResponseWriter, r *http.Request, seq int64, body []byte, f *Fault) {
	acct, ok := p.authenticate(w, r)
	if !ok {
		return
	}
	req, ok := parse(w, body, true)
	if !ok {
		return
	}
	sub, isOAuth := strings.CutPrefix(acct, oauthPrefix)
	if isOAuth && !p.admitOAuth(w, sub) {
		return
	}
	if p.opts.EnforceRequestsPerMinute && p.overLimit(w, acct) {
		return
	}
	words, stop := req.reply()
	u := usage{InputTokens: req.inputTokens(), OutputTokens: len(words)}
	total := u.InputTokens
	if c, ok := p.applyCache(acct, body); ok {
		u.CacheReadInputTokens = c.read
		u.CacheCreationInputTokens = c.creation5m + c.creation1h
		u.CacheCreation = &cacheCreation{Ephemeral5m: c.creation5m, Ephemeral1h: c.creation1h}
		u.InputTokens = max(total-c.read-u.CacheCreationInputTokens, 0)
	}
	p.chargeRequest(w, acct, total+u.OutputTokens)
	if isOAuth {
		p.chargeOAuth(w, sub, total+u.OutputTokens)
	}
	msg := messageBody{ID: "msg_sim_" + pad(seq), Type: "message", Role: "assistant", Model: *req.Model, Usage: u}
	tool := req.forcedTool()
	var toolInput []byte
	if tool != "" {
		// A forced tool is called with the echoed words as its input.
		toolInput, _ = json.Marshal(map[string]string{"text": strings.Join(words, " ")})
		stop = "tool_use"
	}
	if !req.Stream {
		msg.Content = []any{textBlock{Type: "text", Text: strings.Join(words, " ")}}
		if tool != "" {
			msg.Content = []any{toolUseBlock{Type: "tool_use", ID: "toolu_sim_" + pad(seq), Name: tool, Input: toolInput}}
		}
		msg.StopReason = &stop
		b, _ := json.Marshal(msg)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
		return
	}
	// message_start reports the usage known before generation; the final
	// output count comes in message_delta, as with the real API.
	msg.Content = []any{}
	msg.Usage.OutputTokens = 1
	s := newStream(w, r, f, p.delay)
	start, _ := json.Marshal(messageStartEvent{Type: "message_start", Message: msg})
	if !s.open() || !s.event("message_start", start) {
		return
	}
	if tool != "" {
		// The input arrives in two input_json_delta events, as the API
		// splits it: a client must join the partial JSON.
		bs, _ := json.Marshal(map[string]any{"type": "content_block_start", "index": 0,
			"content_block": toolUseBlock{Type: "tool_use", ID: "toolu_sim_" + pad(seq), Name: tool, Input: json.RawMessage("{}")}})
		if !s.event("content_block_start", bs) || !s.event("ping", pingData) {
			return
		}
		half := len(toolInput) / 2
		for _, part := range []string{string(toolInput[:half]), string(toolInput[half:])} {
			d, _ := json.Marshal(map[string]any{"type": "content_block_delta", "index": 0,
				"delta": map[string]string{"type": "input_json_delta", "partial_json": part}})
			if !s.event("content_block_delta", d) {
				return
			}
		}
	} else if !s.event("content_block_start", blockStartData) || !s.event("ping", pingData) {
		return
	}
	text := words
	if tool != "" {
		text = nil // the answer is the tool call
	}
	for i, word := range text {
		b := append(s.scratch[:0], `{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"`...)
		if i > 0 {
			b = append(b, ' ')
		}
		b = appendEscaped(b, word)
		s.scratch = append(b, `"}}`...)
		if !s.event("content_block_delta", s.scratch) {
			return
		}
	}
	var md messageDeltaEvent
	md.Type, md.Delta.StopReason, md.Usage.OutputTokens = "message_delta", stop, len(words)
	delta, _ := json.Marshal(md)
	if s.event("content_block_stop", blockStopData) && s.event("message_delta", delta) {
		s.event("message_stop", messageStop)
	}
}

// appendEscaped appends s as the inside of a JSON string. s comes from a
// decoded JSON string, so it is valid UTF-8 and its multi-byte sequences may
// be copied as they are; only quotes, backslashes and control characters
// need escaping.
func appendEscaped(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return b
}
