package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// checkMessagesBody fails unless b is a Messages request the API accepts
// in shape: a model, max_tokens ≥ 1, alternating user/assistant turns with
// non-empty content of known blocks, tool results only first in user
// turns, no empty text, at most four cache breakpoints.
func checkMessagesBody(t *testing.T, in, b []byte) {
	t.Helper()
	var r struct {
		Model       string         `json:"model"`
		MaxTokens   int            `json:"max_tokens"`
		System      []block        `json:"system"`
		Messages    []msgMessage   `json:"messages"`
		Tools       []msgTool      `json:"tools"`
		Stop        []string       `json:"stop_sequences"`
		Temperature *float64       `json:"temperature"`
		TopP        *float64       `json:"top_p"`
		Stream      bool           `json:"stream"`
		ToolChoice  *msgToolChoice `json:"tool_choice"`
		Metadata    *msgMetadata   `json:"metadata"`
		ServiceTier string         `json:"service_tier"`
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		t.Fatalf("%s → not a Messages body (%v): %s", in, err, b)
	}
	fail := func(why string) { t.Fatalf("%s → %s: %s", in, why, b) }
	if r.Model == "" || r.MaxTokens < 1 || len(r.Messages) == 0 {
		fail("model, max_tokens or messages missing")
	}
	breakpoints := 0
	checkBlock := func(bl block, role string, i int) {
		if bl.CacheControl != nil {
			breakpoints++
		}
		switch bl.Type {
		case "text":
			if bl.Text == "" {
				fail("empty text block")
			}
		case "image":
			if role != "user" || bl.Source == nil || (bl.Source.Type != "base64" && bl.Source.Type != "url") {
				fail("bad image block")
			}
		case "tool_use":
			if role != "assistant" || bl.ID == "" || bl.Name == "" || !isObject(bl.Input) {
				fail("bad tool_use block")
			}
		case "tool_result":
			if role != "user" || bl.ToolUseID == "" {
				fail("bad tool_result block")
			}
			for _, c := range bl.Content {
				if c.Type != "text" || c.Text == "" {
					fail("bad tool_result content")
				}
			}
		default:
			fail("unknown block type " + bl.Type)
		}
	}
	for _, s := range r.System {
		if s.Type != "text" {
			fail("system block not text")
		}
		checkBlock(s, "system", 0)
	}
	for i, m := range r.Messages {
		if m.Role != "user" && m.Role != "assistant" {
			fail("bad role")
		}
		if i > 0 && r.Messages[i-1].Role == m.Role {
			fail("roles do not alternate")
		}
		if len(m.Content) == 0 {
			fail("empty content")
		}
		results := true
		for j, bl := range m.Content {
			checkBlock(bl, m.Role, j)
			if bl.Type == "tool_result" && !results {
				fail("tool_result after other content")
			}
			results = results && bl.Type == "tool_result"
		}
	}
	for _, tl := range r.Tools {
		var schema struct {
			Type string `json:"type"`
		}
		if tl.Name == "" || json.Unmarshal(tl.InputSchema, &schema) != nil || schema.Type != "object" {
			fail("bad tool")
		}
		if tl.CacheControl != nil {
			breakpoints++
		}
	}
	for _, st := range r.Stop {
		if strings.TrimSpace(st) == "" {
			fail("blank stop sequence")
		}
	}
	if tc := r.ToolChoice; tc != nil {
		switch tc.Type {
		case "auto", "any", "none":
		case "tool":
			if tc.Name == "" {
				fail("tool choice without a name")
			}
		default:
			fail("bad tool_choice")
		}
		if tc.Type != "none" && len(r.Tools) == 0 {
			fail("tool_choice without tools")
		}
	}
	if (r.Temperature != nil && (*r.Temperature < 0 || *r.Temperature > 1)) || (r.TopP != nil && (*r.TopP < 0 || *r.TopP > 1)) {
		fail("sampling out of range")
	}
	if breakpoints > 4 {
		fail("more than four cache breakpoints")
	}
}

func FuzzTranslate(f *testing.F) {
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,AAAA"}}]}],"stop":["x"],"temperature":0.5}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"required","parallel_tool_calls":false}`))
	f.Add([]byte(`{"model":"m","messages":[{"role":"assistant","content":[{"type":"refusal","refusal":""}],"refusal":"no"},{"role":"developer","content":[]}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{}}}}`))
	f.Add([]byte(`{"model":"m<&>\u2028","messages":[{"role":"user","content":"\u00e9\n\"x\""}],"temperature":1e-7,"top_p":0.000001,"user":"u>","service_tier":"auto","stream":true,"stream_options":{"include_usage":true},"stop":"s&","tools":[{"type":"function","function":{"name":"f","description":"d<","parameters":{"type":"object", "properties":{"a<":{}}}}}],"tool_choice":{"type":"function","function":{"name":"f"}}}`))
	// Contents given as strings: plain ones (kept as views of the body),
	// and each kind of byte that is not.
	f.Add([]byte(`{"model":"m","messages":[{"role":"system","content":"plain ~ text"},{"role":"user","content":"a<b"},{"role":"assistant","content":"x&y>z"},{"role":"user","content":"\u0041 \/ \t"},{"role":"assistant","content":"caf\u00e9 é"},{"role":"tool","tool_call_id":"c","content":"plain"},{"role":"user","content":" "},{"role":"developer","content":"\""}]}`))
	f.Add([]byte("{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"\x7f\"},{\"role\":\"assistant\",\"content\":\"\xff\"},{\"role\":\"user\",\"content\" : \"spaced\" }]}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		out, info, err := Translate(in)
		// The appended body is byte for byte encoding/json's, and
		// refusals are the same.
		ref := new(translation)
		ref.reference = true
		refOut, refInfo, refErr := ref.translate(in)
		if !bytes.Equal(out, refOut) || info != refInfo || !reflect.DeepEqual(err, refErr) {
			t.Fatalf("%s: appended body differs from encoding/json's:\n%s %+v %+v\n%s %+v %+v", in, out, info, err, refOut, refInfo, refErr)
		}
		if err != nil {
			if err.Status != 400 || err.Type != "invalid_request_error" || err.Message == "" || err.Code == "" {
				t.Fatalf("%s: refusal %+v", in, err)
			}
			if !json.Valid(err.Body()) {
				t.Fatalf("error body %s", err.Body())
			}
			return
		}
		if info.Model == "" {
			t.Fatalf("%s: no model in info", in)
		}
		checkMessagesBody(t, in, out)
		// The relay takes the model and the stream flag from Info
		// instead of scanning the body: they must be the body's.
		var top struct {
			Model  string `json:"model"`
			Stream bool   `json:"stream"`
		}
		if json.Unmarshal(out, &top) != nil || top.Model != info.Model || top.Stream != info.Stream {
			t.Fatalf("%s: info %+v, body %s", in, info, out)
		}
	})
}

// checkChunks fails unless out is a sequence of data payloads, each a chat
// chunk or an error, ending with exactly one terminal: [DONE] after a
// complete answer, an error otherwise.
func checkChunks(t *testing.T, in, out []byte, s *Stream) {
	t.Helper()
	text := string(out)
	if !strings.HasSuffix(text, "\n\n") {
		t.Fatalf("%q → output does not end an event: %q", in, text)
	}
	evs := strings.Split(strings.TrimSuffix(text, "\n\n"), "\n\n")
	terminal := 0
	for i, ev := range evs {
		if ev == ": ping" {
			continue
		}
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.ContainsAny(d, "\r\n") {
			t.Fatalf("%q → not one data line: %q", in, ev)
		}
		last := i == len(evs)-1
		if d == "[DONE]" {
			terminal++
			if !last || !s.Done {
				t.Fatalf("%q → [DONE] not last or not done", in)
			}
			continue
		}
		var c struct {
			Object  *string         `json:"object"`
			Choices json.RawMessage `json:"choices"`
			Error   *struct {
				Message string `json:"message"`
				Type    string `json:"type"`
			} `json:"error"`
		}
		if err := json.Unmarshal([]byte(d), &c); err != nil {
			t.Fatalf("%q → payload not JSON: %q", in, d)
		}
		switch {
		case c.Error != nil:
			terminal++
			if !last || !s.Failed || c.Error.Message == "" {
				t.Fatalf("%q → error not last: %q", in, text)
			}
		case c.Object == nil || *c.Object != "chat.completion.chunk" || c.Choices == nil:
			t.Fatalf("%q → not a chunk: %q", in, d)
		}
	}
	if terminal != 1 {
		t.Fatalf("%q → %d terminal payloads: %q", in, terminal, text)
	}
}

func FuzzStream(f *testing.F) {
	f.Add([]byte(sse(toolStream...)), uint8(5))
	f.Add([]byte(sse(toolStream[:6]...)), uint8(1))
	f.Add([]byte(sse(`{"type":"error","error":{"type":"overloaded_error","message":"o"}}`)), uint8(3))
	f.Add([]byte("data: {\"type\":\"message_stop\"}\r\n\r\ndata: x\n\n"), uint8(2))
	f.Add([]byte(sse(`{"type":"message_start","message":{"id":"m<&>\u2028\u00e9","model":"\u0001\b\f\ud800x\"\\"}}`,
		`{"type":"content_block_start","index":0,"content_block":{"type":"tool_use","id":"t\u007f","name":"f\t"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"input_json_delta","partial_json":"{\"a\":\"<\u2029>\"}"}}`,
		`{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"\u00ff\ufffd\n"}}`,
		`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"input_tokens":-3,"output_tokens":9223372036854775807}}`,
		`{"type":"message_stop"}`)), uint8(7))
	f.Add([]byte(sse(`{"type":"message_start","message":{"id":"msg_a<b","model":"m&n"}}`,
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"x>y"}}`,
		`{"type":"message_stop"}`)), uint8(64))
	f.Fuzz(func(t *testing.T, in []byte, split uint8) {
		size := int(split)%64 + 1
		for _, info := range []Info{{Stream: true}, {Stream: true, IncludeUsage: true, JSONTool: true}} {
			s, ref := NewStream(info, 1), NewStream(info, 1)
			ref.reflect = true
			var out, want []byte
			for i := 0; i < len(in); i += size {
				out = s.Feed(out, in[i:min(i+size, len(in))])
			}
			out = s.End(out)
			checkChunks(t, in, out, s)
			// The appended chunks are byte for byte encoding/json's.
			want = ref.End(ref.Feed(want, in))
			if !bytes.Equal(out, want) {
				t.Fatalf("%q → appended chunks differ from encoding/json's:\n%q\n%q", in, out, want)
			}
		}
	})
}
