package openai

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

func TestCompletionMapsAnswer(t *testing.T) {
	t.Parallel()
	body := `{"id":"msg_01X","type":"message","role":"assistant","model":"claude-x","content":[
		{"type":"thinking","thinking":"hmm"},
		{"type":"text","text":"Checking "},{"type":"text","text":"both."},
		{"type":"tool_use","id":"toolu_1","name":"weather","input":{"city":"Paris"}}],
		"stop_reason":"tool_use","usage":{"input_tokens":10,"cache_creation_input_tokens":5,"cache_read_input_tokens":100,"output_tokens":7}}`
	out, err := Completion([]byte(body), Info{Model: "asked"}, 1700000000)
	if err != nil {
		t.Fatal(err)
	}
	got := asJSON(t, string(out))
	want := asJSON(t, `{"id":"chatcmpl-01X","object":"chat.completion","created":1700000000,"model":"claude-x","system_fingerprint":null,
		"choices":[{"index":0,"logprobs":null,"finish_reason":"tool_calls","message":{"role":"assistant","content":"Checking both.",
			"tool_calls":[{"id":"toolu_1","type":"function","function":{"name":"weather","arguments":"{\"city\":\"Paris\"}"}}]}}],
		"usage":{"prompt_tokens":115,"completion_tokens":7,"total_tokens":122,"prompt_tokens_details":{"cached_tokens":100},"completion_tokens_details":{"reasoning_tokens":0}}}`)
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("got  %s", out)
	}
}

func TestFinishReasons(t *testing.T) {
	t.Parallel()
	for stop, want := range map[string]string{"end_turn": "stop", "stop_sequence": "stop", "max_tokens": "length",
		"tool_use": "tool_calls", "refusal": "content_filter", "model_context_window_exceeded": "length", "pause_turn": "stop"} {
		if got := finishReason(stop, false); got != want {
			t.Errorf("%s → %s, want %s", stop, got, want)
		}
	}
	if finishReason("tool_use", true) != "stop" {
		t.Error("a json_schema answer must finish with stop")
	}
}

func TestCompletionJSONToolIsContent(t *testing.T) {
	t.Parallel()
	out, err := Completion([]byte(`{"id":"msg_1","content":[{"type":"tool_use","id":"t","name":"json_response","input":{"n": 4}}],"stop_reason":"tool_use"}`), Info{JSONTool: true}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Choices []struct {
			FinishReason string `json:"finish_reason"`
			Message      struct {
				Content   string `json:"content"`
				ToolCalls []any  `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(out, &c) != nil || c.Choices[0].Message.Content != `{"n":4}` || c.Choices[0].FinishReason != "stop" || c.Choices[0].Message.ToolCalls != nil {
		t.Fatalf("%s", out)
	}
}

func TestErrorsMapToOpenAIShape(t *testing.T) {
	t.Parallel()
	cases := []struct {
		status         int
		body           string
		typ, code, msg string
	}{
		{429, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`, "rate_limit_error", "rate_limit_exceeded", "slow down"},
		{401, `{"type":"error","error":{"type":"authentication_error","message":"invalid API key"}}`, "invalid_request_error", "invalid_api_key", "invalid API key"},
		{529, `{"type":"error","error":{"type":"overloaded_error","message":"busy"}}`, "server_error", "overloaded", "busy"},
		{502, `<html>bad gateway</html>`, "server_error", "server_error", "upstream answered with status 502"},
		{418, `{"type":"error","error":{"type":"teapot_error","message":"short and stout"}}`, "invalid_request_error", "teapot_error", "short and stout"},
	}
	for _, c := range cases {
		e := ErrorFrom(c.status, []byte(c.body))
		if e.Status != c.status || e.Type != c.typ || e.Code != c.code || e.Message != c.msg {
			t.Errorf("%d %s: %+v", c.status, c.body, e)
		}
	}
}

func TestModelList(t *testing.T) {
	t.Parallel()
	out, err := ModelList([]byte(`{"data":[{"type":"model","id":"claude-a","display_name":"A","created_at":"2025-02-19T00:00:00Z"}],"has_more":false}`))
	if err != nil || string(out) != `{"object":"list","data":[{"id":"claude-a","object":"model","created":1739923200,"owned_by":"anthropic"}]}` {
		t.Fatalf("%s %v", out, err)
	}
	out, err = ModelList([]byte(`{"type":"model","id":"claude-a","created_at":"2025-02-19T00:00:00Z"}`))
	if err != nil || string(out) != `{"id":"claude-a","object":"model","created":1739923200,"owned_by":"anthropic"}` {
		t.Fatalf("%s %v", out, err)
	}
	if _, err := ModelList([]byte(`{}`)); err == nil {
		t.Fatal("an empty object is neither")
	}
}

// sse renders Messages events as the provider sends them.
func sse(events ...string) string {
	var b strings.Builder
	for _, e := range events {
		var typ struct{ Type string }
		_ = json.Unmarshal([]byte(e), &typ)
		fmt.Fprintf(&b, "event: %s\ndata: %s\n\n", typ.Type, e)
	}
	return b.String()
}

var toolStream = []string{
	`{"type":"message_start","message":{"id":"msg_9","model":"claude-x","usage":{"input_tokens":12,"cache_read_input_tokens":30,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Let me check."}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","id":"toolu_a","name":"weather","input":{}}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"{\"city\":"}}`,
	`{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"\"Paris\"}"}}`,
	`{"type":"content_block_stop","index":1}`,
	`{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"toolu_b","name":"weather","input":{}}}`,
	`{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"city\":\"Rome\"}"}}`,
	`{"type":"content_block_stop","index":2}`,
	`{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":40}}`,
	`{"type":"message_stop"}`,
}

// chunks splits translated output into its data payloads.
func chunks(t *testing.T, out string) []string {
	t.Helper()
	var ds []string
	for _, ev := range strings.Split(strings.TrimSuffix(out, "\n\n"), "\n\n") {
		if strings.HasPrefix(ev, ": ") {
			continue
		}
		d, ok := strings.CutPrefix(ev, "data: ")
		if !ok || strings.Contains(d, "\n") {
			t.Fatalf("not one data line: %q", ev)
		}
		ds = append(ds, d)
	}
	return ds
}

func TestStreamTranslatesToolCallsAndUsage(t *testing.T) {
	t.Parallel()
	in := sse(toolStream...)
	// Any split of the upstream bytes gives the same chunks.
	var whole []byte
	s := NewStream(Info{Model: "asked", Stream: true, IncludeUsage: true}, 42)
	whole = s.Feed(whole, []byte(in))
	for _, size := range []int{1, 7, 64} {
		s2 := NewStream(Info{Model: "asked", Stream: true, IncludeUsage: true}, 42)
		var out []byte
		for i := 0; i < len(in); i += size {
			out = s2.Feed(out, []byte(in[i:min(i+size, len(in))]))
		}
		if string(out) != string(whole) {
			t.Fatalf("split %d differs:\n%s\nvs\n%s", size, out, whole)
		}
	}
	if !s.Done || s.Failed {
		t.Fatalf("done %v failed %v", s.Done, s.Failed)
	}
	got := chunks(t, string(whole))
	head := `"id":"chatcmpl-9","object":"chat.completion.chunk","created":42,"model":"claude-x"`
	want := []string{
		`{` + head + `,"choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{"content":"Let me check."},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"toolu_a","type":"function","function":{"name":"weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"toolu_b","type":"function","function":{"name":"weather","arguments":""}}]},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{\"city\":\"Rome\"}"}}]},"logprobs":null,"finish_reason":null}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[{"index":0,"delta":{},"logprobs":null,"finish_reason":"tool_calls"}],"system_fingerprint":null}`,
		`{` + head + `,"choices":[],"usage":{"prompt_tokens":42,"completion_tokens":40,"total_tokens":82,"prompt_tokens_details":{"cached_tokens":30},"completion_tokens_details":{"reasoning_tokens":0}},"system_fingerprint":null}`,
		`[DONE]`,
	}
	if len(got) != len(want) {
		t.Fatalf("got %d chunks:\n%s", len(got), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("chunk %d:\n got %s\nwant %s", i, got[i], want[i])
		}
	}
	if !strings.Contains(string(whole), ": ping\n\n") {
		t.Fatal("ping not kept as a comment")
	}
}

// A stream the upstream cuts, or ends with an error event, ends with an
// error payload and never with [DONE].
func TestStreamCutEndsWithError(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"cut":          sse(toolStream[:4]...),
		"cut mid-line": sse(toolStream[:4]...) + `data: {"type":"content_blo`,
		"error event":  sse(toolStream[:4]...) + sse(`{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}`),
		// Without a message the stream's own is kept, not an empty one.
		"error event without a message": sse(toolStream[:4]...) + sse(`{"type":"error","error":{"type":"overloaded_error"}}`),
	} {
		s := NewStream(Info{Stream: true}, 1)
		out := s.End(s.Feed(nil, []byte(in)))
		if strings.Contains(string(out), "[DONE]") || !s.Failed {
			t.Fatalf("%s: %s", name, out)
		}
		got := chunks(t, string(out))
		var e errorBody
		if json.Unmarshal([]byte(got[len(got)-1]), &e) != nil || e.Error.Message == "" || e.Error.Type != "server_error" {
			t.Fatalf("%s: last chunk %s", name, got[len(got)-1])
		}
		if name == "error event" && e.Error.Message != "Overloaded" {
			t.Fatalf("the upstream's message is lost: %s", got[len(got)-1])
		}
	}
}

// The writer translates a collected JSON answer and fixes its length.
func TestWriterTranslatesJSONAndErrors(t *testing.T) {
	t.Parallel()
	now := fakeclock.New(time.Unix(5, 0))
	rr := httptest.NewRecorder()
	w := NewWriter(rr, Chat, now)
	if _, err := w.Translate([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}]}`)); err != nil {
		t.Fatal(err)
	}
	body := `{"id":"msg_1","model":"m","content":[{"type":"text","text":"ok"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":1}}`
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(200)
	_, _ = w.Write([]byte(body))
	w.Flush()
	w.Finish()
	if rr.Code != 200 || rr.Header().Get("Content-Length") != fmt.Sprint(rr.Body.Len()) || !strings.Contains(rr.Body.String(), `"content":"ok"`) {
		t.Fatalf("%d %v %s", rr.Code, rr.Header(), rr.Body)
	}

	rr = httptest.NewRecorder()
	w = NewWriter(rr, Chat, now)
	_, _ = w.Translate([]byte(`{"model":"m","messages":[{"role":"user","content":"x"}],"n":3}`))
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(400)
	_, _ = w.Write([]byte(`{"type":"error","error":{"type":"invalid_request_error","message":"n is not supported"}}`))
	w.Finish()
	if rr.Code != 400 || !strings.Contains(rr.Body.String(), `"param":"n"`) || !strings.Contains(rr.Body.String(), `"code":"unsupported_parameter"`) {
		t.Fatalf("%d %s", rr.Code, rr.Body)
	}
	if !w.Failed() {
		t.Fatal("a 400 is a failure")
	}
}

// An upstream 429 keeps its status and retry advice.
func TestWriterKeepsRetryAdvice(t *testing.T) {
	t.Parallel()
	rr := httptest.NewRecorder()
	w := NewWriter(rr, Chat, clock.Real{})
	w.Header().Set("Retry-After", "7")
	w.Header().Set("X-Should-Retry", "true")
	w.WriteHeader(http.StatusTooManyRequests)
	_, _ = w.Write([]byte(`{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`))
	w.Finish()
	if rr.Code != 429 || rr.Header().Get("Retry-After") != "7" || rr.Header().Get("X-Should-Retry") != "true" ||
		rr.Body.String() != `{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}` {
		t.Fatalf("%d %v %s", rr.Code, rr.Header(), rr.Body)
	}
}

// The proxy's own errors reach an OpenAI client in OpenAI's terms, with
// the status the proxy chose: the type and code from the Anthropic type,
// an unknown type kept as the code, classed by its status.
func TestFromProxy(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		e               *proxyerr.Error
		typ, code, body string
	}{
		{proxyerr.Authentication("invalid API key"), "invalid_request_error", "invalid_api_key",
			`{"error":{"message":"invalid API key","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}`},
		{proxyerr.RateLimited("slow down", time.Second), "rate_limit_error", "rate_limit_exceeded",
			`{"error":{"message":"slow down","type":"rate_limit_error","param":null,"code":"rate_limit_exceeded"}}`},
		{proxyerr.Overloaded("busy"), "server_error", "overloaded",
			`{"error":{"message":"busy","type":"server_error","param":null,"code":"overloaded"}}`},
		{proxyerr.New(418, "teapot_error", "short"), "invalid_request_error", "teapot_error",
			`{"error":{"message":"short","type":"invalid_request_error","param":null,"code":"teapot_error"}}`},
		{proxyerr.New(502, "odd_error", "odd"), "server_error", "odd_error",
			`{"error":{"message":"odd","type":"server_error","param":null,"code":"odd_error"}}`},
	} {
		o := FromProxy(c.e)
		if o.Status != c.e.Status || o.Type != c.typ || o.Code != c.code || string(o.Body()) != c.body {
			t.Errorf("%s: %d %s %s %s", c.e.Type, o.Status, o.Type, o.Code, o.Body())
		}
	}
}
