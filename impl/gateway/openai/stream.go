package openai

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"sync"

	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
)

// Stream translates a Messages event stream into Chat Completions chunks,
// event by event: each complete upstream event yields its chunks at once,
// nothing waits for the end of the answer.
type Stream struct {
	info    Info
	created int64
	// id is the chunks' id, in idBuf while it fits: a stream is made per
	// answer, and its first chunk need not wait for an allocation.
	id     []byte
	idBuf  [48]byte
	model  string
	usage  msgUsage
	finish string
	// tools maps a content block's index to its tool call's index among
	// the answer's tool calls (OpenAI counts tool calls only); -1 marks
	// the json_response block whose input is the content.
	tools map[int]int
	calls int
	// line holds an incomplete line between two Feed calls.
	line []byte
	// data gathers an event's data lines, in a buffer of dataBufs
	// (dataPtr) while the stream holds one.
	data    []byte
	dataPtr *[]byte
	// Done: the answer ended (message_stop) and [DONE] was written.
	// Failed: an error chunk was written; nothing follows it.
	Done, Failed bool
	// reflect encodes chunks with encoding/json, the reference the
	// appended encoding is fuzzed against.
	reflect bool
	dec     eventDecoder
	ev      upstreamEvent
}

// NewStream returns the translator of one answer.
func NewStream(info Info, created int64) *Stream {
	s := new(Stream)
	s.start(info, created)
	return s
}

// start readies s, which is zero, for a new answer: its fields are set
// one by one, since zeroing the whole value again (the decoded event and
// the id buffer included) cost as much as a part of the first event.
func (s *Stream) start(info Info, created int64) {
	s.info, s.created, s.model = info, created, info.Model
}

// Feed reads upstream bytes (any split) and appends the chunks they
// complete to out.
func (s *Stream) Feed(out, p []byte) []byte {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		if i < 0 {
			s.line = append(s.line, p...)
			return out
		}
		line := p[:i]
		if len(s.line) > 0 {
			s.line = append(s.line, line...)
			line = s.line
		}
		p = p[i+1:]
		out = s.lineDone(out, bytes.TrimSuffix(line, []byte{'\r'}))
		s.line = s.line[:0]
	}
	s.releaseData()
	return out
}

// dataBufs holds the buffers an event's data lines are gathered in. An
// event usually arrives in one read, so its buffer is taken and given
// back within one Feed: a stream holds one only while an event is split
// between reads, and its first event is not gathered into a buffer grown
// from nothing.
var dataBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

// gather appends an event's data line to s.data.
func (s *Stream) gather(d []byte) {
	if s.dataPtr == nil {
		s.dataPtr = dataBufs.Get().(*[]byte)
		s.data = (*s.dataPtr)[:0]
	}
	if len(s.data) > 0 {
		s.data = append(s.data, '\n')
	}
	s.data = append(s.data, d...)
}

// releaseData gives the data buffer back once no event is half gathered.
func (s *Stream) releaseData() {
	if s.dataPtr == nil || len(s.data) > 0 {
		return
	}
	if cap(s.data) <= maxChunkBuf {
		*s.dataPtr = s.data[:0]
		dataBufs.Put(s.dataPtr)
	}
	s.data, s.dataPtr = nil, nil
}

func (s *Stream) lineDone(out, line []byte) []byte {
	switch {
	case len(line) == 0:
		if len(s.data) > 0 {
			out = s.event(out, s.data)
			s.data = s.data[:0]
		}
	case bytes.HasPrefix(line, []byte("data:")):
		s.gather(bytes.TrimPrefix(line[5:], []byte{' '}))
	}
	// event: lines are not needed: every data payload names its type.
	return out
}

type streamEvent struct {
	Type    string `json:"type"`
	Message *struct {
		ID    string   `json:"id"`
		Model string   `json:"model"`
		Usage msgUsage `json:"usage"`
	} `json:"message"`
	Index        int        `json:"index"`
	ContentBlock *respBlock `json:"content_block"`
	Delta        *struct {
		Type        string  `json:"type"`
		Text        string  `json:"text"`
		PartialJSON string  `json:"partial_json"`
		StopReason  *string `json:"stop_reason"`
	} `json:"delta"`
	Usage *struct {
		InputTokens              *int64 `json:"input_tokens"`
		CacheCreationInputTokens *int64 `json:"cache_creation_input_tokens"`
		CacheReadInputTokens     *int64 `json:"cache_read_input_tokens"`
		OutputTokens             *int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *anthropicErr `json:"error"`
}

// event translates one upstream event.
func (s *Stream) event(out, data []byte) []byte {
	if s.Done || s.Failed {
		return out
	}
	// One event value per stream, zeroed for each event: decoding into a
	// fresh local would cost an allocation per event.
	e := &s.ev
	if !s.dec.decode(data, e) {
		return s.Fail(out, streamFailure("the upstream sent an event that is not JSON"))
	}
	// The event's byte fields are views into data: a value the stream
	// keeps past this event is copied into a string.
	switch string(e.Type) {
	case "message_start":
		if e.HasMessage {
			s.id = append(append(s.idBuf[:0], "chatcmpl-"...), bytes.TrimPrefix(e.MessageID, []byte("msg_"))...)
			s.usage = e.MessageUsage
			if len(e.MessageModel) > 0 && string(e.MessageModel) != s.model {
				s.model = string(e.MessageModel)
			}
		}
		empty := ""
		return s.chunk(out, &chatDelta{Role: "assistant", Content: &empty}, nil)
	case "content_block_start":
		if !e.HasBlock || string(e.BlockType) != "tool_use" {
			return out
		}
		if s.tools == nil {
			s.tools = map[int]int{}
		}
		if s.info.JSONTool && string(e.BlockName) == jsonToolName {
			s.tools[e.Index] = -1
			return out
		}
		idx := s.calls
		s.calls++
		s.tools[e.Index] = idx
		tc := toolCallOut{Index: &idx, ID: string(e.BlockID), Type: "function"}
		tc.Function.Name = string(e.BlockName)
		return s.chunk(out, &chatDelta{ToolCalls: []toolCallOut{tc}}, nil)
	case "content_block_delta":
		if !e.HasDelta {
			return out
		}
		switch string(e.DeltaType) {
		case "text_delta":
			t := string(e.Text)
			return s.chunk(out, &chatDelta{Content: &t}, nil)
		case "input_json_delta":
			idx, ok := s.tools[e.Index]
			switch {
			case !ok || len(e.PartialJSON) == 0:
				return out
			case idx < 0:
				t := string(e.PartialJSON)
				return s.chunk(out, &chatDelta{Content: &t}, nil)
			}
			tc := toolCallOut{Index: &idx}
			tc.Function.Arguments = string(e.PartialJSON)
			return s.chunk(out, &chatDelta{ToolCalls: []toolCallOut{tc}}, nil)
		}
		// Thinking and citation deltas have no Chat Completions form.
		return out
	case "message_delta":
		if e.HasUsage {
			u := &e.Usage
			if e.UsageSet&usageInput != 0 {
				s.usage.InputTokens = u.InputTokens
			}
			if e.UsageSet&usageCacheCreation != 0 {
				s.usage.CacheCreationInputTokens = u.CacheCreationInputTokens
			}
			if e.UsageSet&usageCacheRead != 0 {
				s.usage.CacheReadInputTokens = u.CacheReadInputTokens
			}
			if e.UsageSet&usageOutput != 0 {
				s.usage.OutputTokens = u.OutputTokens
			}
		}
		if e.HasDelta && e.HasStop {
			s.finish = finishReason(string(e.StopReason), s.info.JSONTool)
		}
		return out
	case "message_stop":
		fr := s.finish
		if fr == "" {
			fr = "stop"
		}
		out = s.chunk(out, &chatDelta{}, &fr)
		if s.info.IncludeUsage {
			out = s.usageChunk(out)
		}
		s.Done = true
		return append(out, "data: [DONE]\n\n"...)
	case "error":
		f := streamFailure("the upstream stream failed")
		if e.HasError {
			// Without a message of its own the error keeps the
			// stream's: the SDKs raise the message, an empty one
			// tells nothing.
			msg := f.Message
			if len(e.ErrorMessage) > 0 {
				msg = string(e.ErrorMessage)
			}
			f = proxyerr.New(f.Status, string(e.ErrorType), msg)
		}
		return s.Fail(out, f)
	case "ping":
		// Kept as a comment line: the SDKs skip it, idle-cutting
		// intermediaries see traffic.
		return append(out, ": ping\n\n"...)
	}
	return out
}

// chunk appends one chunk with the delta.
func (s *Stream) chunk(out []byte, delta *chatDelta, finish *string) []byte {
	if !s.reflect {
		out = append(out, "data: "...)
		out = s.appendChunk(out, delta, finish)
		return append(out, "\n\n"...)
	}
	d := cloneDelta(delta)
	var f *string
	if finish != nil {
		fr := strings.Clone(*finish)
		f = &fr
	}
	c := completion{ID: string(s.id), Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []choice{{Index: 0, Delta: &d, FinishReason: f}}}
	return s.emit(out, &c)
}

func (s *Stream) usageChunk(out []byte) []byte {
	if !s.reflect {
		out = append(out, "data: "...)
		out = s.appendUsageChunk(out)
		return append(out, "\n\n"...)
	}
	c := completion{ID: string(s.id), Object: "chat.completion.chunk", Created: s.created, Model: s.model,
		Choices: []choice{}, Usage: usageOf(s.usage)}
	return s.emit(out, &c)
}

func (s *Stream) emit(out []byte, c *completion) []byte {
	b, _ := json.Marshal(c) // of plain types: cannot fail
	out = append(out, "data: "...)
	out = append(out, b...)
	return append(out, "\n\n"...)
}

// streamFailure is a stream's failure: it has no status of its own (the
// 200 went out), so it is classed as a server's.
func streamFailure(msg string) *proxyerr.Error {
	return proxyerr.API(http.StatusInternalServerError, msg)
}

// Fail appends the error chunk that ends a stream the OpenAI SDKs raise on
// (a data payload with an error member); no [DONE] follows it.
func (s *Stream) Fail(out []byte, f *proxyerr.Error) []byte {
	if s.Done || s.Failed {
		return out
	}
	s.Failed = true
	e := FromProxy(f)
	out = append(out, "data: "...)
	out = append(out, e.body()...)
	return append(out, "\n\n"...)
}

// End appends what the end of the upstream stream calls for: nothing after
// [DONE] or an error, an error chunk when the answer stopped short (the
// upstream closed without message_stop).
func (s *Stream) End(out []byte) []byte {
	if len(s.line) > 0 {
		out = s.lineDone(out, s.line)
		s.line = s.line[:0]
	}
	out = s.lineDone(out, nil)
	s.releaseData()
	return s.Fail(out, streamFailure("the upstream stream ended before the answer was complete"))
}

// cloneDelta deeply copies a delta for the reference encoding, so that
// nothing it points to escapes the caller's stack on the appended path.
func cloneDelta(delta *chatDelta) chatDelta {
	d := chatDelta{Role: strings.Clone(delta.Role)}
	if delta.Content != nil {
		c := strings.Clone(*delta.Content)
		d.Content = &c
	}
	for _, tc := range delta.ToolCalls {
		c := toolCallOut{ID: strings.Clone(tc.ID), Type: strings.Clone(tc.Type)}
		if tc.Index != nil {
			i := *tc.Index
			c.Index = &i
		}
		c.Function.Name = strings.Clone(tc.Function.Name)
		c.Function.Arguments = strings.Clone(tc.Function.Arguments)
		d.ToolCalls = append(d.ToolCalls, c)
	}
	return d
}
