// Package keepalive keeps a conversation's provider-side prompt cache warm
// while its user is likely to come back: after a turn whose prompt carries
// cache_control breakpoints, it seals the cached prefix and schedules a
// refresh (the prefix with max_tokens 1) shortly before the cache's TTL
// runs out, again after each renewal, until a bound is reached, the
// conversation moves on, or the classifier says nobody is waiting.
// docs/keepalive.md describes the session hash, bounds and outcomes.
package keepalive

import (
	"bytes"
	"encoding/json"
	"errors"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/affinity"
)

// Config is a principal's cache_keepalive, as the admin API stores it
// (normalised, defaults filled in).
type Config struct {
	Enabled                bool  `json:"enabled"`
	RefreshLeadTime5mSecs  int64 `json:"refresh_lead_time_5m_secs"`
	RefreshLeadTime1hSecs  int64 `json:"refresh_lead_time_1h_secs"`
	MaxRefreshesPerSession int64 `json:"max_refreshes_per_session"`
	MaxTotalDurationSecs   int64 `json:"max_total_duration_secs"`
	SnapshotMaxBytes       int64 `json:"snapshot_max_bytes"`
	Classifier             struct {
		ExtraWaitForUserTools   []string `json:"extra_wait_for_user_tools"`
		TreatEndTurnAsAmbiguous bool     `json:"treat_end_turn_as_ambiguous"`
	} `json:"classifier"`
}

// ParseConfig reads a stored cache_keepalive; nil when unset or disabled.
func ParseConfig(raw json.RawMessage) *Config {
	if len(raw) == 0 {
		return nil
	}
	var c Config
	if json.Unmarshal(raw, &c) != nil || !c.Enabled {
		return nil
	}
	return &c
}

// Lead is how long before the cache expires a refresh runs.
func (c *Config) Lead(ttl time.Duration) time.Duration {
	if ttl >= time.Hour {
		return time.Duration(c.RefreshLeadTime1hSecs) * time.Second
	}
	return time.Duration(c.RefreshLeadTime5mSecs) * time.Second
}

// Prompt is what keep-alive needs of a Messages request.
type Prompt struct {
	Model string
	// Hash identifies the conversation: see SessionHash.
	Hash string
	// TTL is the cache lifetime of the last breakpoint (5m or 1h).
	TTL time.Duration
	// Refresh is the smallest request renewing the cached prefix: the
	// request cut after its last cache_control breakpoint, max_tokens 1,
	// not streamed.
	Refresh []byte
}

var (
	errNoBreakpoint = errors.New("no cache_control breakpoint")
	errNotObject    = errors.New("request is not a JSON object")
)

// Requests are read member by member, by each key's exact text, as JSON
// defines keys and as the provider reads them: encoding/json's struct
// decoding also matches a key in another case ({"model":…,"MODEL":…}), so
// keep-alive would refresh another model or prompt than the one served.

// members decodes a JSON object; false for anything else (null included).
func members(raw json.RawMessage) (map[string]json.RawMessage, bool) {
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil, false
	}
	return m, true
}

// text decodes a JSON string; "" for anything else.
func text(raw json.RawMessage) string {
	var s string
	_ = json.Unmarshal(raw, &s)
	return s
}

// blockBreakpoint reports whether a content block (or tool, or system
// block) carries cache_control, and its TTL.
func blockBreakpoint(raw json.RawMessage) (bool, time.Duration) {
	b, ok := members(raw)
	if !ok {
		return false, 0
	}
	cc, ok := members(b["cache_control"])
	if !ok {
		return false, 0
	}
	if text(cc["ttl"]) == "1h" {
		return true, time.Hour
	}
	return true, 5 * time.Minute
}

// SessionHash identifies a conversation: SHA-256 over the principal, the
// model, the system prompt, the tools and the first message. Every turn of
// one conversation repeats those, so turns map to one session; two
// conversations that share them also share their cached prefix, so
// keeping one warm keeps both. The router groups sessions by the same hash
// (affinity.PromptHash), so a keep-alive session and its requests are one.
func SessionHash(principalID, model string, system, tools, first json.RawMessage) string {
	return affinity.PromptHash(principalID, model, system, tools, first)
}

// ParsePrompt reads a Messages request of principalID. It fails when the
// request has no cache_control breakpoint (nothing to keep warm).
func ParsePrompt(principalID string, body []byte) (*Prompt, error) {
	if !bytes.Contains(body, []byte(`"cache_control"`)) {
		return nil, errNoBreakpoint
	}
	r, ok := members(body)
	if !ok {
		return nil, errNotObject
	}
	model, system, tools := text(r["model"]), r["system"], r["tools"]
	var messages []json.RawMessage
	if raw, ok := r["messages"]; ok {
		if err := json.Unmarshal(raw, &messages); err != nil {
			return nil, err
		}
	}
	if len(messages) == 0 || model == "" {
		return nil, errNoBreakpoint
	}
	p := &Prompt{Model: model, Hash: SessionHash(principalID, model, system, tools, messages[0])}

	// The last breakpoint, searched in the prompt's order: tools, system,
	// then messages. Messages are cut after it.
	found := false
	cutMsg, cutBlock := -1, -1
	var toolList, systemList []json.RawMessage
	if json.Unmarshal(tools, &toolList) == nil {
		for _, t := range toolList {
			if ok, ttl := blockBreakpoint(t); ok {
				found, p.TTL = true, ttl
			}
		}
	}
	if json.Unmarshal(system, &systemList) == nil {
		for _, b := range systemList {
			if ok, ttl := blockBreakpoint(b); ok {
				found, p.TTL = true, ttl
			}
		}
	}
	for i, raw := range messages {
		m, ok := members(raw)
		if !ok {
			continue
		}
		var blocks []json.RawMessage
		if json.Unmarshal(m["content"], &blocks) != nil {
			continue
		}
		for j, b := range blocks {
			if ok, ttl := blockBreakpoint(b); ok {
				found, p.TTL, cutMsg, cutBlock = true, ttl, i, j
			}
		}
	}
	if !found {
		return nil, errNoBreakpoint
	}
	out := map[string]any{"model": model, "max_tokens": 1}
	if len(system) > 0 {
		out["system"] = system
	}
	if len(tools) > 0 {
		out["tools"] = tools
	}
	if cutMsg < 0 {
		// The breakpoint is in the tools or system: the first message is
		// the smallest valid continuation.
		out["messages"] = []json.RawMessage{messages[0]}
	} else {
		msgs := append([]json.RawMessage{}, messages[:cutMsg]...)
		m, _ := members(messages[cutMsg])
		var blocks []json.RawMessage
		_ = json.Unmarshal(m["content"], &blocks)
		last, _ := json.Marshal(map[string]any{"role": text(m["role"]), "content": blocks[:cutBlock+1]})
		msgs = append(msgs, last)
		out["messages"] = msgs
	}
	p.Refresh, _ = json.Marshal(out)
	return p, nil
}

// Verdict is the classifier's reading of a turn's answer.
type Verdict string

const (
	// WaitingOnUser: the turn ended and the user speaks next.
	WaitingOnUser Verdict = "waiting_on_user"
	// Ambiguous: end_turn when configured as ambiguous; one refresh only.
	Ambiguous Verdict = "ambiguous"
	// NotWaiting: the client continues by itself (a tool call it runs, a
	// cut answer): no refresh.
	NotWaiting Verdict = "not_waiting"
)

// Answer is what the classifier reads of a response.
type Answer struct {
	StopReason string
	ToolNames  []string
}

// Classify decides whether the conversation waits on its user.
func (c *Config) Classify(a Answer) Verdict {
	switch a.StopReason {
	case "end_turn":
		if c.Classifier.TreatEndTurnAsAmbiguous {
			return Ambiguous
		}
		return WaitingOnUser
	case "tool_use":
		for _, n := range a.ToolNames {
			for _, w := range c.Classifier.ExtraWaitForUserTools {
				if n == w {
					return WaitingOnUser
				}
			}
		}
	}
	return NotWaiting
}

// ReadAnswer extracts the stop reason and tool names from a non-streaming
// body or the kept lines of an event stream.
func ReadAnswer(body []byte, sse [][]byte) Answer {
	var a Answer
	type block struct {
		Type string `json:"type"`
		Name string `json:"name"`
	}
	if len(body) > 0 {
		var m struct {
			StopReason string  `json:"stop_reason"`
			Content    []block `json:"content"`
		}
		if json.Unmarshal(body, &m) == nil {
			a.StopReason = m.StopReason
			for _, b := range m.Content {
				if b.Type == "tool_use" {
					a.ToolNames = append(a.ToolNames, b.Name)
				}
			}
		}
	}
	for _, line := range sse {
		line = bytes.TrimPrefix(line, []byte("data:"))
		var ev struct {
			Type  string `json:"type"`
			Delta struct {
				StopReason string `json:"stop_reason"`
			} `json:"delta"`
			ContentBlock block `json:"content_block"`
		}
		if json.Unmarshal(bytes.TrimSpace(line), &ev) != nil {
			continue
		}
		switch ev.Type {
		case "message_delta":
			if ev.Delta.StopReason != "" {
				a.StopReason = ev.Delta.StopReason
			}
		case "content_block_start":
			if ev.ContentBlock.Type == "tool_use" {
				a.ToolNames = append(a.ToolNames, ev.ContentBlock.Name)
			}
		}
	}
	return a
}
