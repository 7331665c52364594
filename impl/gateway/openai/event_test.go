package openai

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// eventView is an upstreamEvent in comparable values.
type eventView struct {
	Type, MessageID, MessageModel, BlockType, BlockText, BlockID, BlockName string
	DeltaType, Text, PartialJSON, StopReason, ErrorType, ErrorMessage       string
	Index                                                                   int
	HasMessage, HasBlock, HasDelta, HasStop, HasUsage, HasError             bool
	MessageUsage, Usage                                                     msgUsage
	UsageSet                                                                uint8
}

func viewOf(e *upstreamEvent) eventView {
	return eventView{
		Type: string(e.Type), MessageID: string(e.MessageID), MessageModel: string(e.MessageModel),
		BlockType: string(e.BlockType), BlockText: string(e.BlockText), BlockID: string(e.BlockID), BlockName: string(e.BlockName),
		DeltaType: string(e.DeltaType), Text: string(e.Text), PartialJSON: string(e.PartialJSON), StopReason: string(e.StopReason),
		ErrorType: string(e.ErrorType), ErrorMessage: string(e.ErrorMessage), Index: e.Index,
		HasMessage: e.HasMessage, HasBlock: e.HasBlock, HasDelta: e.HasDelta, HasStop: e.HasStop, HasUsage: e.HasUsage, HasError: e.HasError,
		MessageUsage: e.MessageUsage, Usage: e.Usage, UsageSet: e.UsageSet,
	}
}

// decodeEventSeeds are events of every kind the translation reads, and
// inputs at the edges of the single-pass decoder's subset.
var decodeEventSeeds = []string{
	string(bytes.TrimPrefix(bytes.SplitN(benchStart, []byte("\n"), 3)[1], []byte("data: "))),
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_a","name":"weather","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"thinking_delta","thinking":"hm"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":16}}`,
	`{"type":"message_delta","delta":{"stop_reason":null},"usage":{"input_tokens":1,"cache_creation_input_tokens":2,"cache_read_input_tokens":3,"output_tokens":null}}`,
	`{"type":"message_stop"}`,
	`{"type":"ping"}`,
	`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`,
	`{"type":"error","error":null}`,
	` { "type" : "ping" , "index" : -0 } `,
	`{"type":"a\u00e9\ud83d\ude00\ud800x\udc00\ud800\ud800\"\\\/\b\f\n\r\t\u0000"}`,
	"{\"type\":\"\xff\xc3(\xe2\x82\"}",
	`{"TYPE":"ping","Index":3}`,
	`{"type":"ping","type":"message_stop"}`,
	`{"type":"ping","Type":"message_stop"}`,
	`{"typ\u0065":"ping"}`,
	`{"ſtop":1,"type":"x"}`,
	`{"index":1.0}`, `{"index":1e2}`, `{"index":9223372036854775807}`, `{"index":9223372036854775808}`,
	`{"index":-9223372036854775808}`, `{"index":-9223372036854775809}`, `{"index":01}`, `{"index":"1"}`,
	`{"message":{"id":"msg_1","model":"m","usage":null,"content":[{"a":[1,-2.5e+3,true,false,null,{}]}]}}`,
	`{"message":[]}`, `{"message":"x"}`, `{"delta":{"text":1}}`, `{"content_block":{"input":[1,2}}`,
	`{"type":"ping"} x`, `{"type":"ping",}`, `{,}`, `{}`, `null`, `[]`, `"x"`, `1`, ``, `{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`,
	"{\"type\":\"a\tb\"}", `{"type":"\u12"}`, `{"type":"\x"}`, `{"a":tru}`, `{"a":-}`, `{"a":1.}`, `{"a":1e}`,
	// Truncated inside a skipped object or array, and in an object read.
	`{"type":"ping","a":{`, `{"type":"ping","a":{ `, `{"type":"ping","a":[`, `{"type":"ping","a":{"b":1,`, `{"type":"ping","a":[1,`,
	`{"message":{`, `{"message":{"id":"x",`, `{"message":{"id"`, `{"message":{"id":`, `{`, `{"type":"ping"`,
}

// The single-pass decoder agrees with encoding/json on every input: when
// it decodes an input at all, encoding/json accepts it and reads the same
// fields; with its fallback, the two agree on acceptance too.
func FuzzDecodeEvent(f *testing.F) {
	for _, s := range decodeEventSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var d eventDecoder
		var want, fast, got upstreamEvent
		ok := d.reference(data, &want)
		if d.fast(data, &fast) {
			if !ok {
				t.Fatalf("%q: decoded by the single pass, refused by encoding/json", data)
			}
			if viewOf(&fast) != viewOf(&want) {
				t.Fatalf("%q: single pass read\n%+v\nencoding/json\n%+v", data, viewOf(&fast), viewOf(&want))
			}
		}
		if d.decode(data, &got) != ok || ok && viewOf(&got) != viewOf(&want) {
			t.Fatalf("%q: decode differs from encoding/json", data)
		}
	})
}

// Every event the translation reads, as providers send it, takes the
// single pass (no fallback to encoding/json), strings with escapes
// included.
func TestDecodeEventTakesTheSinglePass(t *testing.T) {
	t.Parallel()
	events := append([]string{
		`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"caf\u00e9 \ud83d\ude00 \"quoted\"\n<&>"}}`,
	}, toolStream...)
	events = append(events, decodeEventSeeds[:13]...)
	for _, ev := range events {
		var d eventDecoder
		var e upstreamEvent
		if !d.fast([]byte(ev), &e) {
			t.Errorf("%s: fell back to encoding/json", ev)
		}
	}
	var d eventDecoder
	var e upstreamEvent
	if !d.fast([]byte(events[0]), &e) || string(e.Text) != "café 😀 \"quoted\"\n<&>" || e.DeltaType == nil || string(e.DeltaType) != "text_delta" {
		t.Errorf("text read as %q", e.Text)
	}
}

// The strings' escapes are resolved as encoding/json resolves them: every
// escape, surrogate pairs, lone and mismatched surrogates, invalid UTF-8.
func TestDecodeEventStrings(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		`plain`:                       "plain",
		`\"\\\/\b\f\n\r\t`:            "\"\\/\b\f\n\r\t",
		`\u00e9\u00E9`:                "éé",
		`\ud83d\ude00`:                "😀",
		`\ud800x`:                     "\ufffdx",
		`\udc00\ud83d\ude00`:          "\ufffd😀",
		`\ud800\ud800\udc00`:          "\ufffd𐀀",
		`\ud800\u0041`:                "\ufffdA",
		"\xff" + `a\n`:                "\ufffda\n",
		"é\xe2\x82":                   "é\ufffd\ufffd",
		strings.Repeat(`\u0041`, 300): strings.Repeat("A", 300),
	}
	for in, want := range cases {
		data := []byte(`{"type":"x","delta":{"text":"` + in + `"}}`)
		var d eventDecoder
		var e, ref upstreamEvent
		if !d.fast(data, &e) {
			t.Errorf("%q: fell back", in)
			continue
		}
		d.reference(data, &ref)
		if string(e.Text) != want || string(ref.Text) != want {
			t.Errorf("%q: read %q, encoding/json %q, want %q", in, e.Text, ref.Text, want)
		}
	}
}

// refIsObject and refObjectSchema are the map-based checks the one-pass
// ones replaced: the reference they are fuzzed against.
func refIsObject(raw json.RawMessage) bool {
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) == nil && m != nil
}

func refObjectSchema(raw json.RawMessage) json.RawMessage {
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

// The one-pass checks of tool arguments and schemas answer as the
// map-based ones on every input: the same object or not, the same schema
// bytes or refusal.
func FuzzSchemaChecks(f *testing.F) {
	for _, s := range []string{
		`{}`, ` {"a":1} `, `null`, `[]`, `"x"`, `{"a":}`, `{"a":1}x`,
		`{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}`,
		`{"type":"string"}`, `{"type" : "object" , "type":"array"}`, `{"type":"array","type":"object"}`,
		`{"typ\u0065":"object"}`, `{"type":"\u006fbject"}`, `{"type":["object"]}`, `{"properties":{}}`,
		`{"TYPE":"object"}`, `{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]],"type":"object"}`,
		"{\"type\":\"object\",\"d\":\"\xff<\"}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		if got, want := isObject(raw), refIsObject(raw); got != want {
			t.Fatalf("isObject(%q) = %v, map-based %v", raw, got, want)
		}
		got, want := objectSchema(raw), refObjectSchema(raw)
		if (got == nil) != (want == nil) || !bytes.Equal(got, want) {
			t.Fatalf("objectSchema(%q) = %q, map-based %q", raw, got, want)
		}
	})
}

// The single-pass request decoder agrees with encoding/json's strict one:
// whenever it decodes a body, encoding/json accepts the body and decodes
// the same request.
func FuzzDecodeRequest(f *testing.F) {
	f.Add(benchChat)
	for _, s := range []string{
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":"hi"},{"role":"assistant","content":"yo"},{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x"],"temperature":0.5,"top_p":1e-1,"max_completion_tokens":7,"user":"u\u00e9"}`,
		`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"},"strict":true}}],"tool_choice":"required","parallel_tool_calls":false}`,
		`{"model":"m","stream":true,"stream_options":{"include_usage":true,"include_obfuscation":null},"messages":[],"tools":[],"max_tokens":null}`,
		`{"Model":"m","MESSAGES":null}`, `{"model":"m","model":"n"}`, `{"model":"m","n":2}`, `{"model":1}`, `{"max_tokens":1.0}`,
		`{"temperature":1e400}`, `{"temperature":-0}`, `{"messages":[null]}`, `{"messages":[{"role":"user","content":"x","extra":1}]}`,
		`{"tools":[{"type":"function","function":null}]}`, `{"messages":[{"tool_calls":[{"function":null}]}]}`, `{} {}`, `null`, ``,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		var fast, ref chatRequest
		if !decodeRequest(body, &fast, new(scalars)) {
			return
		}
		if err := decodeStrict(bytes.NewReader(body), &ref); err != nil {
			t.Fatalf("%q: decoded in one pass, refused by encoding/json: %v", body, err)
		}
		if !reflect.DeepEqual(fast, ref) {
			t.Fatalf("%q: one pass read\n%+v\nencoding/json\n%+v", body, fast, ref)
		}
	})
}

// Requests of the common shape (text, tools and tool results, streaming
// options) take the single pass.
func TestDecodeRequestTakesTheSinglePass(t *testing.T) {
	t.Parallel()
	for _, body := range []string{
		string(benchChat),
		`{"model":"m","messages":[{"role":"system","content":"s"},{"role":"user","content":[{"type":"text","text":"a"}]}],"stop":["x"],"temperature":0.5,"top_p":1,"max_completion_tokens":7,"user":"u"}`,
		`{"model":"m","messages":[{"role":"user","content":"q"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"}],"tools":[{"type":"function","function":{"name":"f","parameters":{"type":"object"}}}],"tool_choice":"auto","parallel_tool_calls":false,"stream":true,"stream_options":{"include_usage":true}}`,
	} {
		var req chatRequest
		if !decodeRequest([]byte(body), &req, new(scalars)) {
			t.Errorf("%s: left to encoding/json", body)
		}
	}
}
