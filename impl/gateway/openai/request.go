// Package openai translates OpenAI's Chat Completions API to the Anthropic
// Messages API and back: a chat request into a Messages body, a Messages
// answer (JSON, event stream or error) into a chat completion, its chunks or
// OpenAI's error shape. The relay serves both dialects through one pipeline;
// this package only rewrites bodies.
package openai

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
)

// DefaultMaxTokens is the Messages max_tokens of a chat request that names
// none: the Messages API requires one, Chat Completions does not.
const DefaultMaxTokens = 4096

// jsonToolName is the tool a json_schema response_format is asked through:
// the Messages API constrains a tool's input to its schema, so the answer
// is the forced tool call's input, given back as the message content.
const jsonToolName = "json_response"

// Error is a refusal in OpenAI's error shape.
type Error struct {
	Status  int
	Type    string
	Message string
	Param   string // empty: null
	Code    string // empty: null
}

func (e *Error) Error() string { return e.Message }

func invalid(param, code, format string, args ...any) *Error {
	return &Error{Status: 400, Type: "invalid_request_error", Param: param, Code: code, Message: fmt.Sprintf(format, args...)}
}

func unsupported(param, why string) *Error {
	return invalid(param, "unsupported_parameter", "%s is not supported by this gateway (%s)", param, why)
}

// Info is what the answer's translation needs to know of the request.
type Info struct {
	Model        string
	Stream       bool
	IncludeUsage bool
	// JSONTool: the answer is the forced json_response tool's input.
	JSONTool bool
}

// chatRequest is the Chat Completions request this gateway accepts. Every
// field OpenAI defines is named, so one that cannot be mapped is refused
// rather than dropped; fields OpenAI does not define are refused by the
// strict decoder.
type chatRequest struct {
	Model               *string           `json:"model"`
	Messages            []chatMessage     `json:"messages"`
	MaxTokens           *int              `json:"max_tokens"`
	MaxCompletionTokens *int              `json:"max_completion_tokens"`
	Stop                json.RawMessage   `json:"stop"`
	Temperature         *float64          `json:"temperature"`
	TopP                *float64          `json:"top_p"`
	Stream              *bool             `json:"stream"`
	StreamOptions       *streamOptions    `json:"stream_options"`
	Tools               []chatTool        `json:"tools"`
	ToolChoice          json.RawMessage   `json:"tool_choice"`
	ParallelToolCalls   *bool             `json:"parallel_tool_calls"`
	ResponseFormat      *responseFormat   `json:"response_format"`
	User                *string           `json:"user"`
	SafetyIdentifier    *string           `json:"safety_identifier"`
	PromptCacheKey      *string           `json:"prompt_cache_key"`
	ServiceTier         *string           `json:"service_tier"`
	Store               *bool             `json:"store"`
	N                   *int              `json:"n"`
	Logprobs            *bool             `json:"logprobs"`
	TopLogprobs         *int              `json:"top_logprobs"`
	LogitBias           map[string]any    `json:"logit_bias"`
	PresencePenalty     *float64          `json:"presence_penalty"`
	FrequencyPenalty    *float64          `json:"frequency_penalty"`
	Seed                *int64            `json:"seed"`
	Metadata            map[string]string `json:"metadata"`
	Modalities          []string          `json:"modalities"`
	Audio               json.RawMessage   `json:"audio"`
	Prediction          json.RawMessage   `json:"prediction"`
	ReasoningEffort     json.RawMessage   `json:"reasoning_effort"`
	Verbosity           json.RawMessage   `json:"verbosity"`
	WebSearchOptions    json.RawMessage   `json:"web_search_options"`
	Functions           json.RawMessage   `json:"functions"`
	FunctionCall        json.RawMessage   `json:"function_call"`
}

type streamOptions struct {
	IncludeUsage       *bool `json:"include_usage"`
	IncludeObfuscation *bool `json:"include_obfuscation"`
}

type chatMessage struct {
	Role         string          `json:"role"`
	Content      json.RawMessage `json:"content"`
	Name         *string         `json:"name"`
	ToolCalls    []toolCall      `json:"tool_calls"`
	ToolCallID   *string         `json:"tool_call_id"`
	Refusal      *string         `json:"refusal"`
	Audio        json.RawMessage `json:"audio"`
	FunctionCall json.RawMessage `json:"function_call"`
}

type toolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

type contentPart struct {
	Type     string `json:"type"`
	Text     string `json:"text"`
	Refusal  string `json:"refusal"`
	ImageURL *struct {
		URL    string `json:"url"`
		Detail string `json:"detail"`
	} `json:"image_url"`
	InputAudio json.RawMessage `json:"input_audio"`
	File       json.RawMessage `json:"file"`
}

type chatTool struct {
	Type     string `json:"type"`
	Function *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Parameters  json.RawMessage `json:"parameters"`
		Strict      *bool           `json:"strict"`
	} `json:"function"`
	Custom json.RawMessage `json:"custom"`
}

type responseFormat struct {
	Type       string `json:"type"`
	JSONSchema *struct {
		Name        string          `json:"name"`
		Description string          `json:"description"`
		Schema      json.RawMessage `json:"schema"`
		Strict      *bool           `json:"strict"`
	} `json:"json_schema"`
}

// Messages wire shapes, written by the translation.
type (
	msgRequest struct {
		Model         string         `json:"model"`
		MaxTokens     int            `json:"max_tokens"`
		System        []block        `json:"system,omitempty"`
		Messages      []msgMessage   `json:"messages"`
		StopSequences []string       `json:"stop_sequences,omitempty"`
		Temperature   *float64       `json:"temperature,omitempty"`
		TopP          *float64       `json:"top_p,omitempty"`
		Stream        bool           `json:"stream,omitempty"`
		Tools         []msgTool      `json:"tools,omitempty"`
		ToolChoice    *msgToolChoice `json:"tool_choice,omitempty"`
		Metadata      *msgMetadata   `json:"metadata,omitempty"`
		ServiceTier   string         `json:"service_tier,omitempty"`
	}
	msgMessage struct {
		Role    string  `json:"role"`
		Content []block `json:"content"`
	}
	block struct {
		Type string `json:"type"`
		Text string `json:"text,omitempty"` // never empty in a text block, unless text is not
		// text is the Text of a content given as a plain string (plainText),
		// a view into the request body in place of Text: the block lives
		// no longer than the translation, which writes it as is.
		text         []byte
		Source       *imageSource    `json:"source,omitempty"`
		ID           string          `json:"id,omitempty"`
		Name         string          `json:"name,omitempty"`
		Input        json.RawMessage `json:"input,omitempty"`
		ToolUseID    string          `json:"tool_use_id,omitempty"`
		Content      []block         `json:"content,omitempty"`
		CacheControl *cacheControl   `json:"cache_control,omitempty"`
	}
	imageSource struct {
		Type      string `json:"type"`
		MediaType string `json:"media_type,omitempty"`
		Data      string `json:"data,omitempty"`
		URL       string `json:"url,omitempty"`
	}
	cacheControl struct {
		Type string `json:"type"`
	}
	msgTool struct {
		Name         string          `json:"name"`
		Description  string          `json:"description,omitempty"`
		InputSchema  json.RawMessage `json:"input_schema"`
		CacheControl *cacheControl   `json:"cache_control,omitempty"`
	}
	msgToolChoice struct {
		Type                   string `json:"type"`
		Name                   string `json:"name,omitempty"`
		DisableParallelToolUse bool   `json:"disable_parallel_tool_use,omitempty"`
	}
	msgMetadata struct {
		UserID string `json:"user_id"`
	}
)

// Translate turns a Chat Completions request body into a Messages request
// body. What cannot be expressed in the Messages API is refused with the
// parameter it concerns, never dropped.
func Translate(body []byte) ([]byte, Info, *Error) {
	t := translations.Get().(*translation)
	b, info, err := t.translate(body)
	if t.reset() {
		translations.Put(t)
	}
	return b, info, err
}

func (t *translation) translate(body []byte) ([]byte, Info, *Error) {
	req, out := &t.req, &t.out
	if !decodeRequest(body, req, &t.mem) {
		// What the single pass read is dropped: encoding/json decodes the
		// body again, from nothing, and names what it refuses.
		msgs := req.Messages[:cap(req.Messages)]
		clear(msgs)
		*req = chatRequest{Messages: msgs[:0]}
		t.rd.Reset(body)
		if err := decodeStrict(&t.rd, req); err != nil {
			return nil, Info{}, err
		}
	}
	if req.Model == nil || *req.Model == "" {
		return nil, Info{}, invalid("model", "missing_required_parameter", "you must provide a model parameter")
	}
	if err := req.refuseUnmappable(); err != nil {
		return nil, Info{}, err
	}
	out.Model, out.MaxTokens = *req.Model, DefaultMaxTokens
	info := Info{Model: *req.Model}
	switch {
	case req.MaxCompletionTokens != nil:
		out.MaxTokens = *req.MaxCompletionTokens
	case req.MaxTokens != nil:
		out.MaxTokens = *req.MaxTokens
	}
	if out.MaxTokens < 1 {
		p := "max_completion_tokens"
		if req.MaxCompletionTokens == nil {
			p = "max_tokens"
		}
		return nil, Info{}, invalid(p, "invalid_value", "%s must be at least 1", p)
	}
	if len(req.Stop) > 0 && string(req.Stop) != "null" {
		var one string
		if json.Unmarshal(req.Stop, &one) == nil {
			out.StopSequences = []string{one}
		} else if json.Unmarshal(req.Stop, &out.StopSequences) != nil {
			return nil, Info{}, invalid("stop", "invalid_type", "stop must be a string or an array of strings")
		}
		for _, s := range out.StopSequences {
			if strings.TrimSpace(s) == "" {
				return nil, Info{}, invalid("stop", "invalid_value", "stop sequences must contain non-whitespace characters")
			}
		}
	}
	if t := req.Temperature; t != nil {
		if *t < 0 || *t > 1 {
			return nil, Info{}, invalid("temperature", "invalid_value", "temperature must be between 0 and 1 for Claude models (got %v)", *t)
		}
		out.Temperature = t
	}
	if p := req.TopP; p != nil {
		if *p < 0 || *p > 1 {
			return nil, Info{}, invalid("top_p", "invalid_value", "top_p must be between 0 and 1")
		}
		out.TopP = p
	}
	if req.Stream != nil && *req.Stream {
		out.Stream, info.Stream = true, true
	}
	if so := req.StreamOptions; so != nil {
		if !info.Stream {
			return nil, Info{}, invalid("stream_options", "invalid_value", "stream_options is only allowed when stream is true")
		}
		info.IncludeUsage = so.IncludeUsage != nil && *so.IncludeUsage
	}
	switch {
	case req.SafetyIdentifier != nil && *req.SafetyIdentifier != "":
		out.Metadata = &msgMetadata{UserID: *req.SafetyIdentifier}
	case req.User != nil && *req.User != "":
		out.Metadata = &msgMetadata{UserID: *req.User}
	}
	if st := req.ServiceTier; st != nil {
		switch *st {
		case "auto":
			out.ServiceTier = "auto"
		case "default":
			out.ServiceTier = "standard_only"
		default:
			return nil, Info{}, invalid("service_tier", "invalid_value", "service_tier %q has no Claude equivalent (use auto or default)", *st)
		}
	}
	if err := translateTools(req, out, &info); err != nil {
		return nil, Info{}, err
	}
	// The reference decodes every text into a string of its own, so that
	// FuzzTranslate compares the views with encoding/json's strings.
	t.contents.views = !t.reference
	if err := translateMessages(req.Messages, out, &t.contents); err != nil {
		return nil, Info{}, err
	}
	placeCacheBreakpoints(out)
	var b []byte
	var err error
	if t.reference {
		b, err = json.Marshal(out)
	} else {
		// Room for the body and what the translation adds to it (the
		// cache breakpoint, the content blocks' wrapping): one
		// allocation, as json.Marshal's copy of its buffer was.
		b, err = appendRequest(make([]byte, 0, len(body)+len(body)/2+128), out)
	}
	if err != nil {
		return nil, Info{}, invalid("", "invalid_value", "request cannot be translated: %v", err)
	}
	return b, info, nil
}

// translation is one request's working memory, pooled: the decoded request
// and the Messages request built from it are marshalled before Translate
// returns, so the next request can reuse their memory.
type translation struct {
	req      chatRequest
	mem      scalars // what req's pointers point to
	out      msgRequest
	contents contents
	rd       bytes.Reader
	// reference writes the body with encoding/json, the reference the
	// appended encoding is fuzzed against.
	reference bool
}

var translations = sync.Pool{New: func() any { return new(translation) }}

// maxPooledTurns bounds the turns a pooled translation keeps room for, so
// one long conversation does not pin its memory.
const maxPooledTurns = 64

// reset zeroes t, keeping the turns' room; false when t is too large to
// be pooled.
func (t *translation) reset() bool {
	in, out := t.req.Messages[:cap(t.req.Messages)], t.out.Messages[:cap(t.out.Messages)]
	slab := t.contents.slab[:cap(t.contents.slab)]
	if len(in) > maxPooledTurns || len(out) > maxPooledTurns || len(slab) > maxPooledTurns {
		return false
	}
	// The slices are cleared whole: encoding/json decodes into the
	// elements it finds, which must hold nothing of the last request,
	// and the slab's blocks hold views of its body.
	clear(in)
	clear(out)
	clear(slab)
	*t = translation{req: chatRequest{Messages: in[:0]}, out: msgRequest{Messages: out[:0]}, contents: contents{slab: slab[:0]}}
	return true
}

// decodeStrict decodes a request with encoding/json, refusing unknown
// members by name.
func decodeStrict(r io.Reader, req *chatRequest) *Error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	if err := dec.Decode(req); err != nil {
		var field string
		if s, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
			field, _ = strconv.Unquote(s)
			return invalid(field, "unknown_parameter", "Unrecognized request argument supplied: %s", field)
		}
		return invalid("", "invalid_json", "request body must be a JSON object: %s", decodeMessage(err))
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return invalid("", "invalid_json", "request body must be one JSON object")
	}
	return nil
}

// decodeMessage is a decoding error without Go's type names.
func decodeMessage(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		if te.Field != "" {
			return te.Field + ": wrong type (" + te.Value + ")"
		}
		return "wrong type (" + te.Value + ")"
	}
	return err.Error()
}

// refuseUnmappable refuses the parameters the Messages API has no
// equivalent for, when they ask for something other than the default.
func (r *chatRequest) refuseUnmappable() *Error {
	switch {
	case r.N != nil && *r.N != 1:
		return unsupported("n", "Claude returns one choice per request")
	case r.Logprobs != nil && *r.Logprobs:
		return unsupported("logprobs", "Claude does not return log probabilities")
	case r.TopLogprobs != nil:
		return unsupported("top_logprobs", "Claude does not return log probabilities")
	case len(r.LogitBias) > 0:
		return unsupported("logit_bias", "Claude has no token biasing")
	case r.PresencePenalty != nil && *r.PresencePenalty != 0:
		return unsupported("presence_penalty", "Claude has no presence penalty")
	case r.FrequencyPenalty != nil && *r.FrequencyPenalty != 0:
		return unsupported("frequency_penalty", "Claude has no frequency penalty")
	case r.Seed != nil:
		return unsupported("seed", "Claude has no seeded sampling")
	case r.Store != nil && *r.Store:
		return unsupported("store", "the gateway stores no completions")
	case len(r.Metadata) > 0:
		return unsupported("metadata", "it is for stored completions, which the gateway does not keep")
	case given(r.Audio):
		return unsupported("audio", "Claude does not produce audio")
	case given(r.Prediction):
		return unsupported("prediction", "Claude has no predicted outputs")
	case given(r.ReasoningEffort):
		return unsupported("reasoning_effort", "use the Messages API for extended thinking")
	case given(r.Verbosity):
		return unsupported("verbosity", "Claude has no verbosity setting")
	case given(r.WebSearchOptions):
		return unsupported("web_search_options", "use the Messages API's web search tool")
	case given(r.Functions):
		return unsupported("functions", "deprecated; use tools")
	case given(r.FunctionCall):
		return unsupported("function_call", "deprecated; use tool_choice")
	case r.StreamOptions != nil && r.StreamOptions.IncludeObfuscation != nil && *r.StreamOptions.IncludeObfuscation:
		return unsupported("stream_options.include_obfuscation", "the gateway does not pad stream chunks")
	}
	for _, m := range r.Modalities {
		if m != "text" {
			return unsupported("modalities", "Claude answers in text only")
		}
	}
	return nil
}

func translateTools(req *chatRequest, out *msgRequest, info *Info) *Error {
	for i, t := range req.Tools {
		if t.Type != "function" || t.Function == nil {
			return unsupported(indexed("tools", i)+".type", "only function tools can be translated")
		}
		if t.Function.Name == "" {
			p := indexed("tools", i)
			return invalid(p+".function.name", "missing_required_parameter", "%s.function.name is required", p)
		}
		schema := t.Function.Parameters
		if len(schema) == 0 || string(schema) == "null" {
			schema = json.RawMessage(`{"type":"object","properties":{}}`)
		} else if schema = objectSchema(schema); schema == nil {
			p := indexed("tools", i)
			return invalid(p+".function.parameters", "invalid_value", "%s.function.parameters must be a JSON Schema of type object", p)
		}
		out.Tools = append(out.Tools, msgTool{Name: t.Function.Name, Description: t.Function.Description, InputSchema: schema})
	}
	if len(req.ToolChoice) > 0 && string(req.ToolChoice) != "null" {
		var s string
		var obj struct {
			Type     string `json:"type"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		switch {
		case json.Unmarshal(req.ToolChoice, &s) == nil:
			switch s {
			case "none":
				out.ToolChoice = &msgToolChoice{Type: "none"}
			case "auto":
				out.ToolChoice = &msgToolChoice{Type: "auto"}
			case "required":
				out.ToolChoice = &msgToolChoice{Type: "any"}
			default:
				return invalid("tool_choice", "invalid_value", "tool_choice must be none, auto, required or a function")
			}
		case json.Unmarshal(req.ToolChoice, &obj) == nil && obj.Type == "function" && obj.Function.Name != "":
			out.ToolChoice = &msgToolChoice{Type: "tool", Name: obj.Function.Name}
		default:
			return unsupported("tool_choice", "only none, auto, required and a named function can be translated")
		}
		if len(out.Tools) == 0 && out.ToolChoice.Type != "none" {
			return invalid("tool_choice", "invalid_value", "tool_choice is only allowed when tools are specified")
		}
	}
	if pt := req.ParallelToolCalls; pt != nil && !*pt && len(out.Tools) > 0 {
		if out.ToolChoice == nil {
			out.ToolChoice = &msgToolChoice{Type: "auto"}
		}
		if out.ToolChoice.Type != "none" {
			out.ToolChoice.DisableParallelToolUse = true
		}
	}
	if rf := req.ResponseFormat; rf != nil {
		switch rf.Type {
		case "text":
		case "json_schema":
			var schema json.RawMessage
			if rf.JSONSchema != nil {
				schema = objectSchema(rf.JSONSchema.Schema)
			}
			if schema == nil {
				return invalid("response_format.json_schema.schema", "invalid_value", "response_format json_schema needs a schema of type object (Claude answers through a tool, whose input is an object)")
			}
			if len(out.Tools) > 0 {
				return unsupported("response_format", "json_schema together with tools cannot be translated")
			}
			desc := rf.JSONSchema.Description
			if desc == "" {
				desc = "Answer by calling this tool with the response as its input."
			}
			out.Tools = []msgTool{{Name: jsonToolName, Description: desc, InputSchema: schema}}
			out.ToolChoice = &msgToolChoice{Type: "tool", Name: jsonToolName}
			info.JSONTool = true
		case "json_object":
			return unsupported("response_format", "json_object has no Claude equivalent; use json_schema")
		default:
			return invalid("response_format.type", "invalid_value", "response_format.type must be text or json_schema")
		}
	}
	return nil
}

// objectSchema returns the JSON Schema raw as a tool's input schema, which
// the Messages API requires to be of type object: a schema that names no
// type gets it; nil when raw is not a schema of an object.
func objectSchema(raw json.RawMessage) json.RawMessage {
	// A schema that names its type is checked in one pass; one that does
	// not is rewritten through a map (the rarer case).
	r := jsonReader{data: raw}
	if typ, found, ok := r.lastMember("type"); ok && found {
		if string(typ) != `"object"` {
			return nil
		}
		return compact(raw)
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || m == nil {
		return nil
	}
	typ, ok := m["type"]
	if !ok {
		m["type"] = json.RawMessage(`"object"`)
		b, err := json.Marshal(m)
		if err != nil {
			return nil
		}
		return b
	}
	if string(compact(typ)) != `"object"` {
		return nil
	}
	return compact(raw)
}

// given reports whether a field was sent with a value other than null.
func given(raw json.RawMessage) bool { return len(raw) > 0 && string(raw) != "null" }

func isObject(raw json.RawMessage) bool {
	r := jsonReader{data: raw}
	r.space()
	if r.pos == len(raw) || raw[r.pos] != '{' {
		return false
	}
	if r.skip(0) {
		r.space()
		return r.pos == len(raw)
	}
	// A syntax error, or nesting deeper than the reader goes.
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

// translateMessages maps the conversation: system and developer messages
// become the system prompt (in order, wherever they stand), tool results
// user turns, and consecutive turns of one role are merged as the Messages
// API requires alternating roles with tool results first.
func translateMessages(msgs []chatMessage, out *msgRequest, c *contents) *Error {
	if len(msgs) == 0 {
		return invalid("messages", "missing_required_parameter", "messages must contain at least one message")
	}
	for i := range msgs {
		m := &msgs[i]
		if err := m.refuseMisplaced(i); err != nil {
			return err
		}
		switch m.Role {
		case "system", "developer":
			blocks, err := c.textParts(m.Content, i, false)
			if err != nil {
				return err
			}
			out.System = append(out.System, blocks...)
		case "user":
			blocks, err := c.userParts(m.Content, i)
			if err != nil {
				return err
			}
			appendTurn(out, "user", blocks)
		case "assistant":
			var blocks []block
			if len(m.Content) > 0 && string(m.Content) != "null" {
				var err *Error
				if blocks, err = c.textParts(m.Content, i, true); err != nil {
					return err
				}
			}
			if m.Refusal != nil && *m.Refusal != "" {
				blocks = append(blocks, textBlock(*m.Refusal))
			}
			for j, tc := range m.ToolCalls {
				if tc.Type != "function" {
					return unsupported(toolCallParam(i, j)+".type", "only function tool calls can be translated")
				}
				if tc.ID == "" || tc.Function.Name == "" {
					tp := toolCallParam(i, j)
					return invalid(tp, "missing_required_parameter", "%s needs an id and a function name", tp)
				}
				args := json.RawMessage(tc.Function.Arguments)
				if strings.TrimSpace(tc.Function.Arguments) == "" {
					args = json.RawMessage("{}")
				} else if !isObject(args) {
					tp := toolCallParam(i, j)
					return invalid(tp+".function.arguments", "invalid_value", "%s.function.arguments must be a JSON object", tp)
				}
				blocks = append(blocks, block{Type: "tool_use", ID: tc.ID, Name: tc.Function.Name, Input: compact(args)})
			}
			if len(blocks) == 0 {
				return invalid(indexed("messages", i)+".content", "missing_required_parameter", "an assistant message needs content or tool_calls")
			}
			appendTurn(out, "assistant", blocks)
		case "tool":
			if m.ToolCallID == nil || *m.ToolCallID == "" {
				return invalid(indexed("messages", i)+".tool_call_id", "missing_required_parameter", "a tool message needs tool_call_id")
			}
			blocks, err := c.textParts(m.Content, i, true)
			if err != nil {
				return err
			}
			appendTurn(out, "user", []block{{Type: "tool_result", ToolUseID: *m.ToolCallID, Content: blocks}})
		case "function":
			return unsupported(indexed("messages", i)+".role", "function messages are deprecated; use tool messages")
		default:
			return invalid(indexed("messages", i)+".role", "invalid_value", "role must be system, developer, user, assistant or tool")
		}
	}
	if len(out.Messages) == 0 {
		return invalid("messages", "invalid_value", "messages must contain a user message besides the system prompt")
	}
	return nil
}

// refuseMisplaced refuses the members a message of its role cannot carry.
func (m *chatMessage) refuseMisplaced(i int) *Error {
	switch {
	case m.Name != nil:
		return unsupported(indexed("messages", i)+".name", "Claude has no participant names")
	case len(m.Audio) > 0 && string(m.Audio) != "null":
		return unsupported(indexed("messages", i)+".audio", "Claude does not take audio")
	case len(m.FunctionCall) > 0 && string(m.FunctionCall) != "null":
		return unsupported(indexed("messages", i)+".function_call", "deprecated; use tool_calls")
	case m.Role != "assistant" && len(m.ToolCalls) > 0:
		return invalid(indexed("messages", i)+".tool_calls", "invalid_value", "only assistant messages carry tool_calls")
	case m.Role != "tool" && m.ToolCallID != nil:
		return invalid(indexed("messages", i)+".tool_call_id", "invalid_value", "only tool messages carry tool_call_id")
	}
	return nil
}

// Parameter names such as messages[3].content[1] are built only on the way
// to an error: a request that translates never pays for them.

func indexed(name string, i int) string { return name + "[" + strconv.Itoa(i) + "]" }

func contentParam(msg int) string { return indexed("messages", msg) + ".content" }

func partParam(msg, part int) string { return indexed(contentParam(msg), part) }

func toolCallParam(msg, call int) string {
	return indexed(indexed("messages", msg)+".tool_calls", call)
}

// ephemeral is the cache breakpoint every marked block shares: read only.
var ephemeral = cacheControl{Type: "ephemeral"}

// contentString decodes a content given as a string, as encoding/json
// would; the single-pass reader spares the reflection of the common case.
func contentString(raw json.RawMessage) (string, bool) {
	if s, ok := jsonString(raw); ok {
		return s, true
	}
	var s string
	if len(raw) == 0 || raw[0] != '"' || json.Unmarshal(raw, &s) != nil {
		return "", false
	}
	return s, true
}

// contents reads the messages' contents for one translation.
type contents struct {
	// views: plain strings stay views of the body (contentText).
	views bool
	// slab holds the blocks of contents given as strings, most requests'
	// only kind: kept with the pooled translation, it spares each of them
	// an allocation.
	slab []block
}

// one gives b as a content of its own, held in the slab. Its capacity is
// one, so a turn that grows by it moves out of the slab.
func (c *contents) one(b block) []block {
	c.slab = append(c.slab, b)
	n := len(c.slab)
	return c.slab[n-1 : n : n]
}

// contentText reads a content given as a string into a text block. A
// string appendString would copy as it stands in the body (plainText) is
// kept as a view when views: most prompts are, and each is then copied
// once, into the Messages body, instead of first into a string.
func contentText(raw json.RawMessage, views bool) (block, bool) {
	if n := len(raw); views && n >= 2 && raw[0] == '"' && raw[n-1] == '"' && plainText([]byte(raw[1:n-1])) {
		return block{Type: "text", text: raw[1 : n-1 : n-1]}, true
	}
	s, ok := contentString(raw)
	return textBlock(s), ok
}

// empty reports whether a text block has no text.
func (b *block) empty() bool { return b.Text == "" && len(b.text) == 0 }

func compact(raw json.RawMessage) json.RawMessage {
	var b bytes.Buffer
	if json.Compact(&b, raw) != nil {
		return raw
	}
	return b.Bytes()
}

// appendTurn adds blocks as a turn of role, merged into the previous turn
// when it has the same role. Tool results go first in a user turn.
func appendTurn(out *msgRequest, role string, blocks []block) {
	n := len(out.Messages)
	if n == 0 || out.Messages[n-1].Role != role {
		out.Messages = append(out.Messages, msgMessage{Role: role, Content: blocks})
		return
	}
	prev := &out.Messages[n-1]
	if len(blocks) > 0 && blocks[0].Type == "tool_result" {
		k := 0
		for k < len(prev.Content) && prev.Content[k].Type == "tool_result" {
			k++
		}
		merged := make([]block, 0, len(prev.Content)+len(blocks))
		merged = append(merged, prev.Content[:k]...)
		merged = append(merged, blocks...)
		merged = append(merged, prev.Content[k:]...)
		prev.Content = merged
		return
	}
	prev.Content = append(prev.Content, blocks...)
}

func textBlock(s string) block { return block{Type: "text", Text: s} }

// textParts reads a content that may hold only text: a string or an array of
// text parts (and refusal parts where refusals allowed).
func (c *contents) textParts(raw json.RawMessage, msg int, refusals bool) ([]block, *Error) {
	if b, ok := contentText(raw, c.views); ok {
		if b.empty() {
			return nil, nil
		}
		return c.one(b), nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		p := contentParam(msg)
		return nil, invalid(p, "invalid_type", "%s must be a string or an array of content parts", p)
	}
	var out []block
	for i, part := range parts {
		switch {
		case part.Type == "text":
			if part.Text != "" {
				out = append(out, textBlock(part.Text))
			}
		case part.Type == "refusal" && refusals:
			if part.Refusal != "" {
				out = append(out, textBlock(part.Refusal))
			}
		default:
			return nil, unsupported(partParam(msg, i)+".type", "only text parts are allowed here")
		}
	}
	return out, nil
}

// userParts reads a user message's content: text and images.
func (c *contents) userParts(raw json.RawMessage, msg int) ([]block, *Error) {
	if b, ok := contentText(raw, c.views); ok {
		if b.empty() {
			p := contentParam(msg)
			return nil, invalid(p, "invalid_value", "%s must not be empty", p)
		}
		return c.one(b), nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		p := contentParam(msg)
		return nil, invalid(p, "invalid_type", "%s must be a string or an array of content parts", p)
	}
	var out []block
	for i, part := range parts {
		switch part.Type {
		case "text":
			if part.Text != "" {
				out = append(out, textBlock(part.Text))
			}
		case "image_url":
			if part.ImageURL == nil {
				pp := partParam(msg, i)
				return nil, invalid(pp+".image_url", "missing_required_parameter", "%s.image_url is required", pp)
			}
			src, err := imageFrom(part.ImageURL.URL, msg, i)
			if err != nil {
				return nil, err
			}
			out = append(out, block{Type: "image", Source: src})
		case "input_audio":
			return nil, unsupported(partParam(msg, i)+".type", "Claude does not take audio")
		case "file":
			return nil, unsupported(partParam(msg, i)+".type", "file parts cannot be translated")
		default:
			return nil, invalid(partParam(msg, i)+".type", "invalid_value", "unknown content part type %q", part.Type)
		}
	}
	if len(out) == 0 {
		p := contentParam(msg)
		return nil, invalid(p, "invalid_value", "%s must not be empty", p)
	}
	return out, nil
}

// imageMediaTypes are the image types the Messages API takes.
var imageMediaTypes = map[string]bool{"image/jpeg": true, "image/png": true, "image/gif": true, "image/webp": true}

// imageFrom maps an image URL: a base64 data URL to a base64 source, an
// https URL to a url source the provider fetches.
func imageFrom(u string, msg, part int) (*imageSource, *Error) {
	p := func() string { return partParam(msg, part) + ".image_url.url" }
	if rest, ok := strings.CutPrefix(u, "data:"); ok {
		meta, data, ok := strings.Cut(rest, ",")
		mt, isB64 := strings.CutSuffix(meta, ";base64")
		if !ok || !isB64 {
			return nil, invalid(p(), "invalid_value", "%s: a data URL must be base64-encoded (data:image/png;base64,...)", p())
		}
		if !imageMediaTypes[mt] {
			return nil, invalid(p(), "invalid_value", "%s: image type %q is not supported (jpeg, png, gif, webp)", p(), mt)
		}
		if _, err := base64.StdEncoding.DecodeString(data); err != nil {
			return nil, invalid(p(), "invalid_value", "%s: data URL is not valid base64", p())
		}
		return &imageSource{Type: "base64", MediaType: mt, Data: data}, nil
	}
	if strings.HasPrefix(u, "https://") && len(u) > len("https://") {
		return &imageSource{Type: "url", URL: u}, nil
	}
	return nil, invalid(p(), "invalid_value", "%s must be an https URL or a base64 data URL", p())
}

// placeCacheBreakpoints marks the prompt for caching as a multi-turn
// conversation needs it: the end of the tools and of the system prompt
// (shared by every turn), the end of the last turn (written now) and the
// end of the user turn before it (what the previous request wrote, read
// now). That is the Messages API's maximum of four breakpoints.
func placeCacheBreakpoints(out *msgRequest) {
	eph := &ephemeral
	if n := len(out.Tools); n > 0 {
		out.Tools[n-1].CacheControl = eph
	}
	if n := len(out.System); n > 0 {
		out.System[n-1].CacheControl = eph
	}
	marked := 0
	for i := len(out.Messages) - 1; i >= 0 && marked < 2; i-- {
		m := &out.Messages[i]
		if marked == 1 && m.Role != "user" {
			continue
		}
		if n := len(m.Content); n > 0 {
			m.Content[n-1].CacheControl = eph
			marked++
		}
	}
}
