package openai

import (
	"encoding/json"
	"strconv"
)

// decodeRequest reads a chat request of the common shape in one pass, into
// a reset req (zero but for the room of its turns): the members most
// requests carry, each of the type encoding/json's target gives it. Anything else (a member it does not read, an
// unknown or repeated one, a syntax or type error) returns false, and the
// request is decoded again by encoding/json, whose refusals name the
// member; FuzzDecodeRequest holds that whenever this decodes a body,
// encoding/json decodes it to the same request.
func decodeRequest(body []byte, req *chatRequest, mem *scalars) bool {
	d := requestDecoder{jsonReader: jsonReader{data: body}, mem: mem}
	if !d.request(req) {
		return false
	}
	d.space()
	return d.pos == len(body)
}

type requestDecoder struct {
	jsonReader
	mem *scalars
}

// scalars holds the values the top-level pointer members of a decoded
// request point to, in the translation that reads it (and zeroes both
// together): a variable of their own would cost each an allocation.
type scalars struct {
	model                          string
	maxTokens, maxCompletionTokens int
	temperature, topP              float64
}

// boolValues are what every decoded *bool points to: read only.
var boolValues = [2]bool{false, true}

var (
	requestMembers  = []string{"model", "messages", "max_tokens", "max_completion_tokens", "stop", "temperature", "top_p", "stream", "stream_options", "tools", "tool_choice", "parallel_tool_calls", "user"}
	messageMembers  = []string{"role", "content", "name", "tool_calls", "tool_call_id", "refusal"}
	toolCallMembers = []string{"id", "type", "function"}
	functionMembers = []string{"name", "arguments"}
	toolMembers     = []string{"type", "function"}
	toolFnMembers   = []string{"name", "description", "parameters", "strict"}
	optionsMembers  = []string{"include_usage", "include_obfuscation"}
)

// elements reads an array of objects, calling elem for each with the
// reader at it; a null element is left to encoding/json.
func (d *requestDecoder) elements(elem func() bool) bool {
	if !d.eat('[') {
		return false
	}
	return d.list(']', func() bool {
		return d.pos < len(d.data) && d.data[d.pos] == '{' && elem()
	})
}

func (d *requestDecoder) request(req *chatRequest) bool {
	return d.fields(requestMembers, false, func(m int) bool {
		switch m {
		case 0:
			return d.strPtr(&req.Model, &d.mem.model)
		case 1:
			if d.null() {
				return true
			}
			req.Messages = req.Messages[:0]
			if req.Messages == nil {
				req.Messages = []chatMessage{}
			}
			return d.elements(func() bool {
				req.Messages = append(req.Messages, chatMessage{})
				return d.message(&req.Messages[len(req.Messages)-1])
			})
		case 2:
			return d.intPtr(&req.MaxTokens, &d.mem.maxTokens)
		case 3:
			return d.intPtr(&req.MaxCompletionTokens, &d.mem.maxCompletionTokens)
		case 4:
			return d.raw(&req.Stop)
		case 5:
			return d.floatPtr(&req.Temperature, &d.mem.temperature)
		case 6:
			return d.floatPtr(&req.TopP, &d.mem.topP)
		case 7:
			return d.boolPtr(&req.Stream)
		case 8:
			if d.null() {
				return true
			}
			req.StreamOptions = new(streamOptions)
			so := req.StreamOptions
			return d.fields(optionsMembers, false, func(m int) bool {
				if m == 0 {
					return d.boolPtr(&so.IncludeUsage)
				}
				return d.boolPtr(&so.IncludeObfuscation)
			})
		case 9:
			if d.null() {
				return true
			}
			req.Tools = []chatTool{}
			return d.elements(func() bool {
				req.Tools = append(req.Tools, chatTool{})
				return d.tool(&req.Tools[len(req.Tools)-1])
			})
		case 10:
			return d.raw(&req.ToolChoice)
		case 11:
			return d.boolPtr(&req.ParallelToolCalls)
		default:
			return d.strPtr(&req.User, nil)
		}
	})
}

func (d *requestDecoder) message(msg *chatMessage) bool {
	return d.fields(messageMembers, false, func(m int) bool {
		switch m {
		case 0:
			return d.strValue(&msg.Role)
		case 1:
			return d.raw(&msg.Content)
		case 2:
			return d.strPtr(&msg.Name, nil)
		case 3:
			if d.null() {
				return true
			}
			msg.ToolCalls = []toolCall{}
			return d.elements(func() bool {
				msg.ToolCalls = append(msg.ToolCalls, toolCall{})
				tc := &msg.ToolCalls[len(msg.ToolCalls)-1]
				return d.fields(toolCallMembers, false, func(m int) bool {
					switch m {
					case 0:
						return d.strValue(&tc.ID)
					case 1:
						return d.strValue(&tc.Type)
					}
					// A struct value: null leaves it as it is.
					return d.null() || d.fields(functionMembers, false, func(m int) bool {
						if m == 0 {
							return d.strValue(&tc.Function.Name)
						}
						return d.strValue(&tc.Function.Arguments)
					})
				})
			})
		case 4:
			return d.strPtr(&msg.ToolCallID, nil)
		default:
			return d.strPtr(&msg.Refusal, nil)
		}
	})
}

func (d *requestDecoder) tool(t *chatTool) bool {
	return d.fields(toolMembers, false, func(m int) bool {
		if m == 0 {
			return d.strValue(&t.Type)
		}
		if d.null() {
			return true
		}
		t.Function = &struct {
			Name        string          `json:"name"`
			Description string          `json:"description"`
			Parameters  json.RawMessage `json:"parameters"`
			Strict      *bool           `json:"strict"`
		}{}
		fn := t.Function
		return d.fields(toolFnMembers, false, func(m int) bool {
			switch m {
			case 0:
				return d.strValue(&fn.Name)
			case 1:
				return d.strValue(&fn.Description)
			case 2:
				return d.raw(&fn.Parameters)
			}
			return d.boolPtr(&fn.Strict)
		})
	})
}

// strValue reads a string into a string field; null leaves it as it is.
func (d *requestDecoder) strValue(dst *string) bool {
	var v []byte
	if d.null() {
		return true
	}
	if !d.str(&v) {
		return false
	}
	*dst = string(v)
	return true
}

// strPtr reads a string into a pointer field; null leaves it nil.
// strPtr reads a string into *dst, held in at (nil: a new variable); as
// intPtr and floatPtr, which are only called once for their member: a
// repeated member is refused.
func (d *requestDecoder) strPtr(dst **string, at *string) bool {
	if d.null() {
		return true
	}
	var v []byte
	if !d.str(&v) {
		return false
	}
	if at == nil {
		at = new(string)
	}
	*at = string(v)
	*dst = at
	return true
}

func (d *requestDecoder) intPtr(dst **int, at *int) bool {
	if d.null() {
		return true
	}
	v, ok := d.integer()
	*at = int(v)
	*dst = at
	return ok
}

func (d *requestDecoder) floatPtr(dst **float64, at *float64) bool {
	if d.null() {
		return true
	}
	start := d.pos
	if d.pos >= len(d.data) || d.data[d.pos] != '-' && (d.data[d.pos] < '0' || d.data[d.pos] > '9') || !d.number() {
		return false
	}
	f, err := strconv.ParseFloat(string(d.data[start:d.pos]), 64)
	if err != nil {
		return false
	}
	*at = f
	*dst = at
	return true
}

func (d *requestDecoder) boolPtr(dst **bool) bool {
	switch {
	case d.null():
		return true
	case d.literal("true"):
		*dst = &boolValues[1]
	case d.literal("false"):
		*dst = &boolValues[0]
	default:
		return false
	}
	return true
}

// raw reads any value into a raw message field, as its bytes.
func (d *requestDecoder) raw(dst *json.RawMessage) bool {
	start := d.pos
	if !d.skip(1) {
		return false
	}
	*dst = d.data[start:d.pos:d.pos]
	return true
}
