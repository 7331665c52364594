package openai

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
)

// Messages answer shapes, as read by the translation.
type (
	msgResponse struct {
		ID         string        `json:"id"`
		Model      string        `json:"model"`
		Content    []respBlock   `json:"content"`
		StopReason *string       `json:"stop_reason"`
		Usage      *msgUsage     `json:"usage"`
		Error      *anthropicErr `json:"error"`
		Type       string        `json:"type"`
	}
	respBlock struct {
		Type  string          `json:"type"`
		Text  string          `json:"text"`
		ID    string          `json:"id"`
		Name  string          `json:"name"`
		Input json.RawMessage `json:"input"`
	}
	msgUsage struct {
		InputTokens              int64 `json:"input_tokens"`
		CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
		OutputTokens             int64 `json:"output_tokens"`
	}
	anthropicErr struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	}
)

// Chat Completions answer shapes.
type (
	completion struct {
		ID                string     `json:"id"`
		Object            string     `json:"object"`
		Created           int64      `json:"created"`
		Model             string     `json:"model"`
		Choices           []choice   `json:"choices"`
		Usage             *chatUsage `json:"usage,omitempty"`
		SystemFingerprint *string    `json:"system_fingerprint"`
	}
	choice struct {
		Index        int          `json:"index"`
		Message      *chatMessOut `json:"message,omitempty"`
		Delta        *chatDelta   `json:"delta,omitempty"`
		Logprobs     *struct{}    `json:"logprobs"`
		FinishReason *string      `json:"finish_reason"`
	}
	chatMessOut struct {
		Role      string        `json:"role,omitempty"`
		Content   *string       `json:"content"`
		Refusal   *string       `json:"refusal,omitempty"`
		ToolCalls []toolCallOut `json:"tool_calls,omitempty"`
	}
	// chatDelta is a chunk's delta: what did not change is left out.
	chatDelta struct {
		Role      string        `json:"role,omitempty"`
		Content   *string       `json:"content,omitempty"`
		ToolCalls []toolCallOut `json:"tool_calls,omitempty"`
	}
	toolCallOut struct {
		Index    *int   `json:"index,omitempty"`
		ID       string `json:"id,omitempty"`
		Type     string `json:"type,omitempty"`
		Function struct {
			Name      string `json:"name,omitempty"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatUsage struct {
		PromptTokens        int64 `json:"prompt_tokens"`
		CompletionTokens    int64 `json:"completion_tokens"`
		TotalTokens         int64 `json:"total_tokens"`
		PromptTokensDetails struct {
			CachedTokens int64 `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
		CompletionTokensDetails struct {
			ReasoningTokens int64 `json:"reasoning_tokens"`
		} `json:"completion_tokens_details"`
	}
)

// usageOf maps Messages usage: OpenAI's prompt tokens include the cached
// ones (read or written), which the Messages API counts apart.
func usageOf(u msgUsage) *chatUsage {
	c := &chatUsage{
		PromptTokens:     u.InputTokens + u.CacheCreationInputTokens + u.CacheReadInputTokens,
		CompletionTokens: u.OutputTokens,
	}
	c.TotalTokens = c.PromptTokens + c.CompletionTokens
	c.PromptTokensDetails.CachedTokens = u.CacheReadInputTokens
	return c
}

// finishReason maps a Messages stop reason.
func finishReason(stop string, jsonTool bool) string {
	switch stop {
	case "max_tokens", "model_context_window_exceeded":
		return "length"
	case "tool_use":
		if jsonTool {
			return "stop"
		}
		return "tool_calls"
	case "refusal":
		return "content_filter"
	default: // end_turn, stop_sequence, pause_turn
		return "stop"
	}
}

// completionID derives the completion's id from the message's.
func completionID(msgID string) string {
	return "chatcmpl-" + strings.TrimPrefix(msgID, "msg_")
}

// Completion translates a Messages answer into a chat completion created
// at created (Unix seconds).
func Completion(body []byte, info Info, created int64) ([]byte, error) {
	var m msgResponse
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, err
	}
	var text strings.Builder
	var calls []toolCallOut
	hasText := false
	for _, b := range m.Content {
		switch b.Type {
		case "text":
			text.WriteString(b.Text)
			hasText = true
		case "tool_use":
			args := string(compact(b.Input))
			if len(b.Input) == 0 {
				args = "{}"
			}
			if info.JSONTool && b.Name == jsonToolName {
				text.WriteString(args)
				hasText = true
				continue
			}
			var tc toolCallOut
			tc.ID, tc.Type = b.ID, "function"
			tc.Function.Name, tc.Function.Arguments = b.Name, args
			calls = append(calls, tc)
		}
	}
	msg := &chatMessOut{Role: "assistant", ToolCalls: calls}
	if hasText {
		s := text.String()
		msg.Content = &s
	}
	stop := ""
	if m.StopReason != nil {
		stop = *m.StopReason
	}
	fr := finishReason(stop, info.JSONTool)
	model := m.Model
	if model == "" {
		model = info.Model
	}
	c := completion{
		ID: completionID(m.ID), Object: "chat.completion", Created: created, Model: model,
		Choices: []choice{{Index: 0, Message: msg, FinishReason: &fr}},
	}
	if m.Usage != nil {
		c.Usage = usageOf(*m.Usage)
	}
	return json.Marshal(&c)
}

// errorBody is OpenAI's error shape.
type errorBody struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func (e *Error) body() []byte {
	var b errorBody
	b.Error.Message, b.Error.Type = e.Message, e.Type
	if e.Param != "" {
		b.Error.Param = &e.Param
	}
	if e.Code != "" {
		b.Error.Code = &e.Code
	}
	out, _ := json.Marshal(&b)
	return out
}

// Body is the error in OpenAI's wire shape.
func (e *Error) Body() []byte { return e.body() }

// errorKinds maps the Anthropic error types to OpenAI's type and a stable
// code; the HTTP status stays the one the gateway or the provider chose,
// which is what the OpenAI SDKs branch and retry on.
var errorKinds = map[string][2]string{
	proxyerr.TypeInvalidRequest:  {"invalid_request_error", ""},
	proxyerr.TypeAuthentication:  {"invalid_request_error", "invalid_api_key"},
	proxyerr.TypePermission:      {"invalid_request_error", "permission_denied"},
	proxyerr.TypeNotFound:        {"invalid_request_error", "not_found"},
	proxyerr.TypeRequestTooLarge: {"invalid_request_error", "request_too_large"},
	proxyerr.TypeRateLimit:       {"rate_limit_error", "rate_limit_exceeded"},
	proxyerr.TypeBilling:         {"insufficient_quota", "insufficient_quota"},
	proxyerr.TypeAPI:             {"server_error", "server_error"},
	proxyerr.TypeOverloaded:      {"server_error", "overloaded"},
	proxyerr.TypeTimeout:         {"server_error", "timeout"},
}

// FromProxy is the proxy path's error in OpenAI's terms: the status stays,
// the Anthropic type becomes OpenAI's type and code.
func FromProxy(e *proxyerr.Error) *Error {
	k, ok := errorKinds[e.Type]
	if !ok {
		k = [2]string{"server_error", e.Type}
		if e.Status < 500 {
			k[0] = "invalid_request_error"
		}
	}
	return &Error{Status: e.Status, Type: k[0], Code: k[1], Message: e.Message}
}

// ErrorFrom maps an Anthropic error body to OpenAI's error; a body that is
// not one keeps its status with a generic message.
func ErrorFrom(status int, body []byte) *Error {
	var m msgResponse
	if json.Unmarshal(body, &m) == nil && m.Error != nil {
		return FromProxy(proxyerr.New(status, m.Error.Type, m.Error.Message))
	}
	typ := proxyerr.TypeAPI
	if status < 500 {
		typ = proxyerr.TypeInvalidRequest
	}
	return FromProxy(proxyerr.New(status, typ, "upstream answered with status "+strconv.Itoa(status)))
}
