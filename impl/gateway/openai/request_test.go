package openai

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// translated decodes a translation into a generic value for comparison.
func translated(t *testing.T, in string) (map[string]any, Info) {
	t.Helper()
	out, info, err := Translate([]byte(in))
	if err != nil {
		t.Fatalf("%s: refused: %v (param %s)", in, err, err.Param)
	}
	var m map[string]any
	if jerr := json.Unmarshal(out, &m); jerr != nil {
		t.Fatalf("output is not JSON: %s", out)
	}
	return m, info
}

func asJSON(t *testing.T, s string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(s), &v); err != nil {
		t.Fatalf("bad want %s: %v", s, err)
	}
	return v
}

func wantField(t *testing.T, m map[string]any, key, want string) {
	t.Helper()
	if got := m[key]; !reflect.DeepEqual(got, asJSON(t, want)) {
		g, _ := json.Marshal(got)
		t.Fatalf("%s = %s, want %s", key, g, want)
	}
}

func TestTranslateSystemMultiTurnAndSampling(t *testing.T) {
	t.Parallel()
	m, info := translated(t, `{"model":"claude-x","messages":[
		{"role":"system","content":"be brief"},
		{"role":"developer","content":[{"type":"text","text":"use metric units"}]},
		{"role":"user","content":"hi"},
		{"role":"assistant","content":"hello"},
		{"role":"user","content":[{"type":"text","text":"how far"},{"type":"text","text":"to the moon"}]}],
		"max_completion_tokens":77,"max_tokens":5,"stop":"END","temperature":0.3,"top_p":0.9,"user":"u-1",
		"n":1,"logprobs":false,"presence_penalty":0,"stream":false}`)
	if info.Model != "claude-x" || info.Stream || info.IncludeUsage || info.JSONTool {
		t.Fatalf("info %+v", info)
	}
	wantField(t, m, "model", `"claude-x"`)
	wantField(t, m, "max_tokens", `77`) // max_completion_tokens wins, as in OpenAI's API
	wantField(t, m, "stop_sequences", `["END"]`)
	wantField(t, m, "temperature", `0.3`)
	wantField(t, m, "top_p", `0.9`)
	wantField(t, m, "metadata", `{"user_id":"u-1"}`)
	wantField(t, m, "system", `[{"type":"text","text":"be brief"},{"type":"text","text":"use metric units","cache_control":{"type":"ephemeral"}}]`)
	wantField(t, m, "messages", `[
		{"role":"user","content":[{"type":"text","text":"hi","cache_control":{"type":"ephemeral"}}]},
		{"role":"assistant","content":[{"type":"text","text":"hello"}]},
		{"role":"user","content":[{"type":"text","text":"how far"},{"type":"text","text":"to the moon","cache_control":{"type":"ephemeral"}}]}]`)
	if _, ok := m["stream"]; ok {
		t.Fatal("stream false must be left out")
	}
}

func TestTranslateDefaultsAndStream(t *testing.T) {
	t.Parallel()
	m, info := translated(t, `{"model":"m","messages":[{"role":"user","content":"x"}],"stream":true,"stream_options":{"include_usage":true},"stop":["a","b"],"max_tokens":9}`)
	if !info.Stream || !info.IncludeUsage {
		t.Fatalf("info %+v", info)
	}
	wantField(t, m, "stream", `true`)
	wantField(t, m, "max_tokens", `9`)
	wantField(t, m, "stop_sequences", `["a","b"]`)
	m, _ = translated(t, `{"model":"m","messages":[{"role":"user","content":"x"}]}`)
	wantField(t, m, "max_tokens", `4096`)
}

func TestTranslateToolsRoundTrip(t *testing.T) {
	t.Parallel()
	m, _ := translated(t, `{"model":"m","messages":[
		{"role":"user","content":"weather in Paris and Rome?"},
		{"role":"assistant","content":null,"tool_calls":[
			{"id":"call_1","type":"function","function":{"name":"weather","arguments":"{\"city\": \"Paris\"}"}},
			{"id":"call_2","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Rome\"}"}}]},
		{"role":"tool","tool_call_id":"call_1","content":"sunny"},
		{"role":"tool","tool_call_id":"call_2","content":[{"type":"text","text":"rain"}]},
		{"role":"user","content":"thanks"}],
		"tools":[{"type":"function","function":{"name":"weather","description":"weather of a city","parameters":{"type":"object","properties":{"city":{"type":"string"}}}}},
			{"type":"function","function":{"name":"noargs"}}],
		"tool_choice":"required","parallel_tool_calls":false}`)
	wantField(t, m, "tools", `[
		{"name":"weather","description":"weather of a city","input_schema":{"type":"object","properties":{"city":{"type":"string"}}}},
		{"name":"noargs","input_schema":{"type":"object","properties":{}},"cache_control":{"type":"ephemeral"}}]`)
	wantField(t, m, "tool_choice", `{"type":"any","disable_parallel_tool_use":true}`)
	wantField(t, m, "messages", `[
		{"role":"user","content":[{"type":"text","text":"weather in Paris and Rome?","cache_control":{"type":"ephemeral"}}]},
		{"role":"assistant","content":[
			{"type":"tool_use","id":"call_1","name":"weather","input":{"city":"Paris"}},
			{"type":"tool_use","id":"call_2","name":"weather","input":{"city":"Rome"}}]},
		{"role":"user","content":[
			{"type":"tool_result","tool_use_id":"call_1","content":[{"type":"text","text":"sunny"}]},
			{"type":"tool_result","tool_use_id":"call_2","content":[{"type":"text","text":"rain"}]},
			{"type":"text","text":"thanks","cache_control":{"type":"ephemeral"}}]}]`)

	for in, want := range map[string]string{
		`"none"`: `{"type":"none"}`,
		`"auto"`: `{"type":"auto"}`,
		`{"type":"function","function":{"name":"weather"}}`: `{"type":"tool","name":"weather"}`,
	} {
		m, _ := translated(t, `{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[{"type":"function","function":{"name":"weather"}}],"tool_choice":`+in+`}`)
		wantField(t, m, "tool_choice", want)
	}
}

func TestTranslateImages(t *testing.T) {
	t.Parallel()
	m, _ := translated(t, `{"model":"m","messages":[{"role":"user","content":[
		{"type":"text","text":"what is this"},
		{"type":"image_url","image_url":{"url":"data:image/png;base64,iVBORw0KGgo="}},
		{"type":"image_url","image_url":{"url":"https://example.com/cat.jpg","detail":"high"}}]}]}`)
	wantField(t, m, "messages", `[{"role":"user","content":[
		{"type":"text","text":"what is this"},
		{"type":"image","source":{"type":"base64","media_type":"image/png","data":"iVBORw0KGgo="}},
		{"type":"image","source":{"type":"url","url":"https://example.com/cat.jpg"},"cache_control":{"type":"ephemeral"}}]}]`)
}

func TestTranslateJSONSchemaResponseFormat(t *testing.T) {
	t.Parallel()
	m, info := translated(t, `{"model":"m","messages":[{"role":"user","content":"x"}],
		"response_format":{"type":"json_schema","json_schema":{"name":"answer","schema":{"type":"object","properties":{"n":{"type":"integer"}}}}}}`)
	if !info.JSONTool {
		t.Fatal("json_schema must be answered through the forced tool")
	}
	wantField(t, m, "tool_choice", `{"type":"tool","name":"json_response"}`)
	tools := m["tools"].([]any)
	if len(tools) != 1 || tools[0].(map[string]any)["name"] != "json_response" {
		t.Fatalf("tools %v", tools)
	}
}

// Nothing the Messages API cannot express is dropped: it is a 400 naming
// the parameter, in OpenAI's error shape.
func TestTranslateRefusesUnmappable(t *testing.T) {
	t.Parallel()
	const msgs = `"messages":[{"role":"user","content":"x"}]`
	cases := []struct{ body, param, code string }{
		{`{"model":"m",` + msgs + `,"n":2}`, "n", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"logprobs":true}`, "logprobs", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"top_logprobs":2}`, "top_logprobs", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"logit_bias":{"1":2}}`, "logit_bias", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"presence_penalty":0.5}`, "presence_penalty", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"frequency_penalty":0.5}`, "frequency_penalty", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"seed":3}`, "seed", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"reasoning_effort":"high"}`, "reasoning_effort", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"modalities":["text","audio"]}`, "modalities", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"response_format":{"type":"json_object"}}`, "response_format", "unsupported_parameter"},
		{`{"model":"m",` + msgs + `,"temperature":1.5}`, "temperature", "invalid_value"},
		{`{"model":"m",` + msgs + `,"max_tokens":0}`, "max_tokens", "invalid_value"},
		{`{"model":"m",` + msgs + `,"stream_options":{"include_usage":true}}`, "stream_options", "invalid_value"},
		{`{"model":"m",` + msgs + `,"frobnicate":1}`, "frobnicate", "unknown_parameter"},
		{`{"model":"m",` + msgs + `,"tool_choice":"auto"}`, "tool_choice", "invalid_value"},
		{`{"model":"m",` + msgs + `,"tools":[{"type":"custom","custom":{"name":"x"}}]}`, "tools[0].type", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":"x","name":"bob"}]}`, "messages[0].name", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`, "messages[0].content[0].type", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"http://plain.example/x.png"}}]}]}`, "messages[0].content[0].image_url.url", "invalid_value"},
		{`{"model":"m","messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/tiff;base64,AAAA"}}]}]}`, "messages[0].content[0].image_url.url", "invalid_value"},
		{`{"model":"m","messages":[{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`, "messages[0].tool_calls[0].function.arguments", "invalid_value"},
		{`{"model":"m","messages":[{"role":"tool","content":"x"}]}`, "messages[0].tool_call_id", "missing_required_parameter"},
		{`{"model":"m","messages":[{"role":"function","content":"x"}]}`, "messages[0].role", "unsupported_parameter"},
		{`{"model":"m","messages":[{"role":"system","content":"only a system prompt"}]}`, "messages", "invalid_value"},
		{`{"model":"m","messages":[]}`, "messages", "missing_required_parameter"},
		{`{` + msgs + `}`, "model", "missing_required_parameter"},
		{`{"model":"m",` + msgs + `} {}`, "", "invalid_json"},
		{`not json`, "", "invalid_json"},
	}
	for _, c := range cases {
		out, _, err := Translate([]byte(c.body))
		if err == nil {
			t.Errorf("%s: accepted as %s", c.body, out)
			continue
		}
		if err.Status != 400 || err.Param != c.param || err.Code != c.code || err.Type != "invalid_request_error" || err.Message == "" {
			t.Errorf("%s: got %+v, want param %q code %q", c.body, err, c.param, c.code)
		}
		var wire struct {
			Error struct {
				Message string  `json:"message"`
				Type    string  `json:"type"`
				Param   *string `json:"param"`
				Code    *string `json:"code"`
			} `json:"error"`
		}
		if json.Unmarshal(err.Body(), &wire) != nil || wire.Error.Message != err.Message || wire.Error.Code == nil || *wire.Error.Code != c.code ||
			(c.param == "") != (wire.Error.Param == nil) {
			t.Errorf("%s: wire shape %s", c.body, err.Body())
		}
	}
}

// Multi-turn caching: the user turn that closed the previous request is
// marked again, so this request reads what the previous one wrote.
func TestCacheBreakpointsFollowTheConversation(t *testing.T) {
	t.Parallel()
	turn1 := `{"role":"user","content":"first question"}`
	turn2 := turn1 + `,{"role":"assistant","content":"first answer"},{"role":"user","content":"second question"}`
	turn3 := turn2 + `,{"role":"assistant","content":"second answer"},{"role":"user","content":"third question"}`
	marked := func(msgs string) []string {
		m, _ := translated(t, `{"model":"m","messages":[{"role":"system","content":"sys"},`+msgs+`]}`)
		var out []string
		for _, msg := range m["messages"].([]any) {
			for _, b := range msg.(map[string]any)["content"].([]any) {
				if bm := b.(map[string]any); bm["cache_control"] != nil {
					out = append(out, bm["text"].(string))
				}
			}
		}
		return out
	}
	if got := marked(turn1); strings.Join(got, "|") != "first question" {
		t.Fatalf("turn 1 marks %v", got)
	}
	if got := marked(turn2); strings.Join(got, "|") != "first question|second question" {
		t.Fatalf("turn 2 marks %v", got)
	}
	if got := marked(turn3); strings.Join(got, "|") != "second question|third question" {
		t.Fatalf("turn 3 marks %v", got)
	}
}

// A reused translation keeps nothing of the request before: each request
// of a varied sequence, translated after the others on one translation,
// gives the bytes (or the refusal) a fresh translation gives.
func TestTranslationReuseKeepsNothing(t *testing.T) {
	t.Parallel()
	reqs := []string{
		`{"model":"a","max_tokens":9,"stop":["x"],"temperature":0.5,"user":"u","service_tier":"auto","stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"s"},{"role":"user","content":"q"},{"role":"assistant","content":"thinking","tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{\"a\":1}"}}]},{"role":"tool","tool_call_id":"c1","content":"r"},{"role":"user","content":[{"type":"text","text":"t"},{"type":"image_url","image_url":{"url":"https://x/i.png"}}]}],"tools":[{"type":"function","function":{"name":"f","parameters":{"properties":{}}}}],"tool_choice":"required","parallel_tool_calls":false}`,
		string(benchChat),
		`{"model":"b","messages":[{"role":"user","content":"one"},{"role":"assistant","content":[{"type":"refusal","refusal":"no"}]},{"role":"user","content":"two"}],"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":{"type":"object"}}}}`,
		`{"model":"c","messages":[{"role":"user","content":"q","name":"n"}]}`,
		`{"model":"d","messages":[{"role":"user"}]}`,
		`{"model":"e","messages":[{"role":"user","content":"last"}]}`,
		`{"model":"f","max_completion_tokens":3,"top_p":0.25,"temperature":0,"stream":false,"messages":[{"role":"user","content":"x"}]}`,
		// String contents enough to outgrow the slab they are held in
		// mid-request, turns merged and marked for caching among them.
		`{"model":"g","messages":[{"role":"system","content":"s1"},{"role":"developer","content":"s2"},{"role":"user","content":"u1"},{"role":"user","content":"u2"},{"role":"assistant","content":"a1"},{"role":"user","content":"u3"},{"role":"assistant","content":"a2"},{"role":"assistant","content":"a3"},{"role":"user","content":"u<4"},{"role":"user","content":"u5"},{"role":"assistant","content":"a4"},{"role":"user","content":"u6"}]}`,
	}
	var reused translation
	for _, order := range [][]int{{0, 1, 2, 3, 4, 5, 6, 7}, {7, 6, 5, 4, 3, 2, 1, 0}, {0, 6, 7, 5, 2, 1, 7, 6}} {
		for _, i := range order {
			got, gotInfo, gotErr := reused.translate([]byte(reqs[i]))
			if !reused.reset() {
				t.Fatal("a small translation is not kept for reuse")
			}
			var fresh translation
			want, wantInfo, wantErr := fresh.translate([]byte(reqs[i]))
			if string(got) != string(want) || gotInfo != wantInfo || !reflect.DeepEqual(gotErr, wantErr) {
				t.Fatalf("request %d after others: %s %+v %v\nfresh: %s %+v %v", i, got, gotInfo, gotErr, want, wantInfo, wantErr)
			}
		}
	}
}

// A body of JSON null, or of another value than an object, is refused
// like any request without a model, and decodes into nothing.
func TestTranslateRefusesNonObjectBodies(t *testing.T) {
	t.Parallel()
	for _, in := range []string{`null`, ` null `, `[]`, `"x"`, `1`} {
		_, _, err := Translate([]byte(in))
		if err == nil || err.Status != 400 || err.Code == "" {
			t.Errorf("%s: %+v", in, err)
		}
	}
}

// TestRefusalNamesTheParameterAtItsIndex pins every refusal whose parameter
// name is built only on the way to the error: the name carries the indices of
// the message, part, tool or tool call at fault (none of them the first), and
// the message names it where it did.
func TestRefusalNamesTheParameterAtItsIndex(t *testing.T) {
	const ok = `{"role":"user","content":"x"},{"role":"assistant","content":"y"},`
	const okTool = `{"type":"function","function":{"name":"f"}},`
	cases := []struct{ body, param, message string }{
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[` + okTool + `{"type":"custom","custom":{"name":"x"}}]}`,
			"tools[1].type", "tools[1].type is not supported by this gateway (only function tools can be translated)"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[` + okTool + okTool + `{"type":"function","function":{"name":""}}]}`,
			"tools[2].function.name", "tools[2].function.name is required"},
		{`{"model":"m","messages":[{"role":"user","content":"x"}],"tools":[` + okTool + `{"type":"function","function":{"name":"g","parameters":{"type":"string"}}}]}`,
			"tools[1].function.parameters", "tools[1].function.parameters must be a JSON Schema of type object"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":"x","name":"bob"}]}`,
			"messages[2].name", "messages[2].name is not supported by this gateway (Claude has no participant names)"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":"x","audio":{"id":"a"}}]}`,
			"messages[2].audio", "messages[2].audio is not supported by this gateway (Claude does not take audio)"},
		{`{"model":"m","messages":[` + ok + `{"role":"assistant","content":"x","function_call":{"name":"f","arguments":"{}"}}]}`,
			"messages[2].function_call", "messages[2].function_call is not supported by this gateway (deprecated; use tool_calls)"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":"x","tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
			"messages[2].tool_calls", "only assistant messages carry tool_calls"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":"x","tool_call_id":"c"}]}`,
			"messages[2].tool_call_id", "only tool messages carry tool_call_id"},
		{`{"model":"m","messages":[` + ok + `{"role":"system","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"https://x.example/a.png"}}]}]}`,
			"messages[2].content[1].type", "messages[2].content[1].type is not supported by this gateway (only text parts are allowed here)"},
		{`{"model":"m","messages":[` + ok + `{"role":"system","content":7}]}`,
			"messages[2].content", "messages[2].content must be a string or an array of content parts"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":""}]}`,
			"messages[2].content", "messages[2].content must not be empty"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[]}]}`,
			"messages[2].content", "messages[2].content must not be empty"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":{"type":"text"}}]}`,
			"messages[2].content", "messages[2].content must be a string or an array of content parts"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url"}]}]}`,
			"messages[2].content[1].image_url", "messages[2].content[1].image_url is required"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"input_audio","input_audio":{"data":"x","format":"wav"}}]}]}`,
			"messages[2].content[1].type", "messages[2].content[1].type is not supported by this gateway (Claude does not take audio)"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"file","file":{"file_id":"f"}}]}]}`,
			"messages[2].content[1].type", "messages[2].content[1].type is not supported by this gateway (file parts cannot be translated)"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"video"}]}]}`,
			"messages[2].content[1].type", `unknown content part type "video"`},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png,AAAA"}}]}]}`,
			"messages[2].content[1].image_url.url", "messages[2].content[1].image_url.url: a data URL must be base64-encoded (data:image/png;base64,...)"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/tiff;base64,AAAA"}}]}]}`,
			"messages[2].content[1].image_url.url", `messages[2].content[1].image_url.url: image type "image/tiff" is not supported (jpeg, png, gif, webp)`},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"data:image/png;base64,!!"}}]}]}`,
			"messages[2].content[1].image_url.url", "messages[2].content[1].image_url.url: data URL is not valid base64"},
		{`{"model":"m","messages":[` + ok + `{"role":"user","content":[{"type":"text","text":"a"},{"type":"image_url","image_url":{"url":"http://x.example/a.png"}}]}]}`,
			"messages[2].content[1].image_url.url", "messages[2].content[1].image_url.url must be an https URL or a base64 data URL"},
		{`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"custom"}]}]}`,
			"messages[1].tool_calls[1].type", "messages[1].tool_calls[1].type is not supported by this gateway (only function tool calls can be translated)"},
		{`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"","type":"function","function":{"name":"f","arguments":"{}"}}]}]}`,
			"messages[1].tool_calls[1]", "messages[1].tool_calls[1] needs an id and a function name"},
		{`{"model":"m","messages":[{"role":"user","content":"x"},{"role":"assistant","tool_calls":[{"id":"a","type":"function","function":{"name":"f","arguments":"{}"}},{"id":"b","type":"function","function":{"name":"f","arguments":"[1]"}}]}]}`,
			"messages[1].tool_calls[1].function.arguments", "messages[1].tool_calls[1].function.arguments must be a JSON object"},
		{`{"model":"m","messages":[` + ok + `{"role":"assistant","content":null}]}`,
			"messages[2].content", "an assistant message needs content or tool_calls"},
		{`{"model":"m","messages":[` + ok + `{"role":"tool","content":"x"}]}`,
			"messages[2].tool_call_id", "a tool message needs tool_call_id"},
		{`{"model":"m","messages":[` + ok + `{"role":"function","content":"x"}]}`,
			"messages[2].role", "messages[2].role is not supported by this gateway (function messages are deprecated; use tool messages)"},
		{`{"model":"m","messages":[` + ok + `{"role":"robot","content":"x"}]}`,
			"messages[2].role", "role must be system, developer, user, assistant or tool"},
	}
	for _, c := range cases {
		out, _, err := Translate([]byte(c.body))
		if err == nil {
			t.Errorf("%s: accepted as %s", c.body, out)
			continue
		}
		if err.Param != c.param || err.Message != c.message {
			t.Errorf("%s:\n got param %q message %q\nwant param %q message %q", c.body, err.Param, err.Message, c.param, c.message)
		}
	}
}

// TestPlainContentStaysAView: a content string written as it stands is
// kept as a view of the body (copied once, into the Messages body); any
// other is decoded into a string, as encoding/json decodes it; the
// reference translation always decodes.
func TestPlainContentStaysAView(t *testing.T) {
	t.Parallel()
	raw := json.RawMessage(`"plain ~ text"`)
	b, ok := contentText(raw, true)
	if !ok || b.Text != "" || string(b.text) != "plain ~ text" || &b.text[0] != &raw[1] {
		t.Fatalf("plain content: %+v, want a view of the body", b)
	}
	if b, ok := contentText(raw, false); !ok || b.Text != "plain ~ text" || b.text != nil {
		t.Fatalf("plain content without views: %+v", b)
	}
	for in, want := range map[string]string{`"a<b"`: "a<b", `"x&y>z"`: "x&y>z", `"\u0041"`: "A", `"tab\t"`: "tab\t", "\"caf\xc3\xa9\"": "café", "\"\x7f\"": "\x7f"} {
		b, ok := contentText(json.RawMessage(in), true)
		if !ok || b.Text != want || b.text != nil {
			t.Errorf("%s: %+v, want the string %q", in, b, want)
		}
	}
	if b, ok := contentText(json.RawMessage(`""`), true); !ok || !b.empty() {
		t.Errorf("empty content: %+v", b)
	}
	for _, in := range []string{`7`, `null`, `"open`, `["a"]`} {
		if b, ok := contentText(json.RawMessage(in), true); ok {
			t.Errorf("%s: read as a string: %+v", in, b)
		}
	}
}
