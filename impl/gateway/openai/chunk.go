package openai

import (
	"encoding/json"
	"strconv"
	"strings"
)

// The stream's chunks are appended field by field: they are the hot path
// of every streamed answer, and reflection encoding cost more than the
// rest of the event's translation. The bytes are those json.Marshal
// writes for a completion (FuzzStream compares the two on every input).

// appendChunk appends the JSON of a chunk with one choice.
func (s *Stream) appendChunk(out []byte, d *chatDelta, finish *string) []byte {
	out = s.appendHead(out)
	out = append(out, `[{"index":0,"delta":{`...)
	sep := false
	if d.Role != "" {
		out = append(out, `"role":`...)
		out = appendString(out, d.Role)
		sep = true
	}
	if d.Content != nil {
		if sep {
			out = append(out, ',')
		}
		out = append(out, `"content":`...)
		out = appendString(out, *d.Content)
		sep = true
	}
	if len(d.ToolCalls) > 0 {
		if sep {
			out = append(out, ',')
		}
		out = append(out, `"tool_calls":[`...)
		for i := range d.ToolCalls {
			if i > 0 {
				out = append(out, ',')
			}
			out = appendToolCall(out, &d.ToolCalls[i])
		}
		out = append(out, ']')
	}
	out = append(out, `},"logprobs":null,"finish_reason":`...)
	if finish == nil {
		out = append(out, "null"...)
	} else {
		out = appendString(out, *finish)
	}
	return append(out, `}],"system_fingerprint":null}`...)
}

// appendUsageChunk appends the JSON of the closing usage chunk.
func (s *Stream) appendUsageChunk(out []byte) []byte {
	u := usageOf(s.usage)
	out = s.appendHead(out)
	out = append(out, `[],"usage":{"prompt_tokens":`...)
	out = strconv.AppendInt(out, u.PromptTokens, 10)
	out = append(out, `,"completion_tokens":`...)
	out = strconv.AppendInt(out, u.CompletionTokens, 10)
	out = append(out, `,"total_tokens":`...)
	out = strconv.AppendInt(out, u.TotalTokens, 10)
	out = append(out, `,"prompt_tokens_details":{"cached_tokens":`...)
	out = strconv.AppendInt(out, u.PromptTokensDetails.CachedTokens, 10)
	out = append(out, `},"completion_tokens_details":{"reasoning_tokens":`...)
	out = strconv.AppendInt(out, u.CompletionTokensDetails.ReasoningTokens, 10)
	return append(out, `}},"system_fingerprint":null}`...)
}

// appendHead appends a chunk's members up to the choices' value.
func (s *Stream) appendHead(out []byte) []byte {
	out = append(out, `{"id":`...)
	out = appendString(out, s.id)
	out = append(out, `,"object":"chat.completion.chunk","created":`...)
	out = strconv.AppendInt(out, s.created, 10)
	out = append(out, `,"model":`...)
	out = appendString(out, s.model)
	return append(out, `,"choices":`...)
}

func appendToolCall(out []byte, tc *toolCallOut) []byte {
	out = append(out, '{')
	if tc.Index != nil {
		out = append(out, `"index":`...)
		out = strconv.AppendInt(out, int64(*tc.Index), 10)
		out = append(out, ',')
	}
	if tc.ID != "" {
		out = append(out, `"id":`...)
		out = appendString(out, tc.ID)
		out = append(out, ',')
	}
	if tc.Type != "" {
		out = append(out, `"type":`...)
		out = appendString(out, tc.Type)
		out = append(out, ',')
	}
	out = append(out, `"function":{`...)
	if tc.Function.Name != "" {
		out = append(out, `"name":`...)
		out = appendString(out, tc.Function.Name)
		out = append(out, ',')
	}
	out = append(out, `"arguments":`...)
	out = appendString(out, tc.Function.Arguments)
	return append(out, "}}"...)
}

// appendString appends v (a string, or its bytes) as a JSON string. Printable ASCII other than the
// quote, the backslash and the characters encoding/json escapes for HTML
// is copied as is; any other string is left to encoding/json, so the
// escaping (control characters, invalid UTF-8, U+2028/U+2029, HTML) is
// its own.
func appendString[T string | []byte](out []byte, v T) []byte {
	if !plainText(v) {
		// A copy, so that v does not escape on the fast path.
		b, _ := json.Marshal(strings.Clone(string(v))) // of a string: cannot fail
		return append(out, b...)
	}
	out = append(out, '"')
	out = append(out, v...)
	return append(out, '"')
}

// plainText reports whether v is printable ASCII without a quote, a
// backslash or what encoding/json escapes for HTML: encoding/json writes
// it as it stands between quotes, and between quotes it is a JSON string
// that decodes to itself.
func plainText[T string | []byte](v T) bool {
	for i := 0; i < len(v); i++ {
		if c := v[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}
