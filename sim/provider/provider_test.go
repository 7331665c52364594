package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
)

func newServer(t *testing.T, o Options) (*Provider, *httptest.Server) {
	t.Helper()
	p := New(o)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

// send makes a request carrying the default credentials; hdr overrides
// them, an empty value deletes a header.
func send(t *testing.T, method, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	res, err := http.DefaultClient.Do(newRequest(t, method, url, body, hdr))
	if err != nil {
		t.Fatal(err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("reading %s %s: %v", method, url, err)
	}
	return res, string(b)
}

func newRequest(t *testing.T, method, url, body string, hdr map[string]string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("content-type", "application/json")
	req.Header.Set("x-api-key", DefaultAPIKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	for k, v := range hdr {
		if v == "" {
			req.Header.Del(k)
		} else {
			req.Header.Set(k, v)
		}
	}
	return req
}

func post(t *testing.T, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	return send(t, "POST", url, body, hdr)
}

// errType checks body is Anthropic's error shape and returns its type.
func errType(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" || e.Error.Message == "" {
		t.Fatalf("not an Anthropic error: %s", body)
	}
	return e.Error.Type
}

type sseEvent struct {
	name string
	data map[string]any
}

// readEvent reads one server-sent event.
func readEvent(rd *bufio.Reader) (sseEvent, error) {
	var ev sseEvent
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return ev, err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && ev.name != "":
			return ev, nil
		case strings.HasPrefix(line, "event: "):
			ev.name = line[len("event: "):]
		case strings.HasPrefix(line, "data: "):
			if err := json.Unmarshal([]byte(line[len("data: "):]), &ev.data); err != nil {
				return ev, fmt.Errorf("event %s: bad data %q: %w", ev.name, line, err)
			}
		}
	}
}

func readEvents(t *testing.T, body string) []sseEvent {
	t.Helper()
	rd := bufio.NewReader(strings.NewReader(body))
	var out []sseEvent
	for {
		ev, err := readEvent(rd)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ev)
	}
}

func names(evs []sseEvent) string {
	var n []string
	for _, e := range evs {
		n = append(n, e.name)
	}
	return strings.Join(n, " ")
}

// The official SDK reads the sim's answers, streamed and not, its token
// counts and its errors: proof that the wire format is the real one.
func TestOfficialSDK(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	ctx := context.Background()
	c := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(DefaultAPIKey), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model: "claude-sim", MaxTokens: 3,
		System:   []anthropic.TextBlockParam{{Text: "be brief"}},
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two \"three\" four five"))},
	}
	msg, err := c.Messages.New(ctx, params)
	if err != nil {
		t.Fatal(err)
	}
	if len(msg.Content) != 1 || msg.Content[0].Text != `one two "three"` || msg.StopReason != anthropic.StopReasonMaxTokens ||
		msg.Usage.InputTokens != 7 || msg.Usage.OutputTokens != 3 || msg.Model != "claude-sim" || !strings.HasPrefix(msg.ID, "msg_") {
		t.Fatalf("message %+v", msg)
	}

	stream := c.Messages.NewStreaming(ctx, params)
	var acc anthropic.Message
	var kinds []string
	for stream.Next() {
		ev := stream.Current()
		kinds = append(kinds, ev.Type)
		if err := acc.Accumulate(ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != msg.Content[0].Text || acc.StopReason != msg.StopReason || acc.Usage.OutputTokens != 3 || acc.Usage.InputTokens != 7 {
		t.Fatalf("streamed %+v", acc)
	}
	if got := strings.Join(kinds, " "); got != "message_start content_block_start content_block_delta content_block_delta content_block_delta content_block_stop message_delta message_stop" {
		t.Fatalf("SDK saw %s", got) // the SDK drops pings itself
	}

	n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-sim", Messages: params.Messages,
		System: anthropic.MessageCountTokensParamsSystemUnion{OfTextBlockArray: params.System}})
	if err != nil || n.InputTokens != 7 {
		t.Fatalf("count_tokens %+v %v", n, err)
	}

	var apiErr *anthropic.Error
	bad := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	if _, err = bad.Messages.New(ctx, params); !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("bad key: %v", err)
	}
	_, err = c.Messages.New(ctx, params, option.WithHeader("x-sim-fault", "status=529"))
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 529 || apiErr.Type() != "overloaded_error" {
		t.Fatalf("529 fault: %v", err)
	}
	stream = c.Messages.NewStreaming(ctx, params, option.WithHeader("x-sim-fault", "error_after_events=3"))
	for stream.Next() {
	}
	if err := stream.Err(); err == nil || !strings.Contains(err.Error(), "overloaded_error") {
		t.Fatalf("mid-stream error event: %v", err)
	}
}

func TestNonStreamingShape(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	res, body := post(t, srv.URL+"/v1/messages", `{"model":"m","max_tokens":10,"system":"s s","messages":[{"role":"user","content":"hi there"}]}`, nil)
	want := `{"id":"msg_sim_000001","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hi there"}],` +
		`"stop_reason":"end_turn","stop_sequence":null,` +
		`"usage":{"input_tokens":4,"cache_creation_input_tokens":0,"cache_read_input_tokens":0,"output_tokens":2}}`
	if res.StatusCode != 200 || body != want {
		t.Fatalf("%d\n got %s\nwant %s", res.StatusCode, body, want)
	}
	if res.Header.Get("Content-Type") != "application/json" || res.Header.Get("request-id") != "req_sim_000001" {
		t.Fatalf("headers %v", res.Header)
	}
}

func TestStreamingSequence(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	res, body := post(t, srv.URL+"/v1/messages", `{"model":"m","max_tokens":2,"stream":true,"messages":[{"role":"user","content":"a b c"}]}`, nil)
	if res.StatusCode != 200 || res.Header.Get("Content-Type") != "text/event-stream" || res.Header.Get("request-id") == "" {
		t.Fatalf("%d %v", res.StatusCode, res.Header)
	}
	evs := readEvents(t, body)
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if names(evs) != want {
		t.Fatalf("events %s", names(evs))
	}
	for _, e := range evs {
		if e.data["type"] != e.name {
			t.Fatalf("event %s carries type %v", e.name, e.data["type"])
		}
	}
	// Every event's JSON starts with its type, as the API sends it.
	for _, line := range strings.Split(body, "\n") {
		if d, ok := strings.CutPrefix(line, "data: "); ok && !strings.HasPrefix(d, `{"type":`) {
			t.Fatalf("type not first: %s", d)
		}
	}
	m := evs[0].data["message"].(map[string]any)
	u := m["usage"].(map[string]any)
	if m["id"] != "msg_sim_000001" || m["role"] != "assistant" || m["model"] != "m" || m["stop_reason"] != nil ||
		u["input_tokens"] != 3.0 || u["cache_creation_input_tokens"] != 0.0 || u["cache_read_input_tokens"] != 0.0 || u["output_tokens"] == nil {
		t.Fatalf("message_start %v", evs[0].data)
	}
	var text string
	for _, e := range evs[3:5] {
		d := e.data["delta"].(map[string]any)
		if d["type"] != "text_delta" || e.data["index"] != 0.0 {
			t.Fatalf("delta %v", e.data)
		}
		text += d["text"].(string)
	}
	md := evs[6].data
	if text != "a b" || md["delta"].(map[string]any)["stop_reason"] != "max_tokens" || md["usage"].(map[string]any)["output_tokens"] != 2.0 {
		t.Fatalf("text %q, message_delta %v", text, md)
	}
}

// Replies are a pure function of the request: echo, truncation, token counts.
func TestDeterministicReplies(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	for _, c := range []struct {
		name, req, text, stop string
		in                    float64
	}{
		{"echo", `"messages":[{"role":"user","content":"x  y\tz\n"}]`, "x y z", "end_turn", 3},
		{"exactly max_tokens", `"max_tokens":3,"messages":[{"role":"user","content":"x y z"}]`, "x y z", "end_turn", 3},
		{"truncated", `"max_tokens":1,"messages":[{"role":"user","content":"x y z"}]`, "x", "max_tokens", 3},
		{"empty conversation", `"messages":[]`, "ok", "end_turn", 1},
		{"last user message", `"messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"a1 a1"},{"role":"user","content":"q2"},{"role":"assistant","content":"pre"}]`, "q2", "end_turn", 5},
		{"blocks and system", `"system":[{"type":"text","text":"sys one"}],"messages":[{"role":"user","content":[{"type":"text","text":"p"},{"type":"image","source":{}},{"type":"text","text":"q"}]}]`, "p q", "end_turn", 4},
		{"escaping", `"messages":[{"role":"user","content":"a\"b c\\d é\u0001 </x>"}]`, "a\"b c\\d é\u0001 </x>", "end_turn", 4},
	} {
		req := `{"model":"m","max_tokens":100,` + c.req + `}`
		if strings.Contains(c.req, "max_tokens") {
			req = `{"model":"m",` + c.req + `}`
		}
		_, body := post(t, srv.URL+"/v1/messages", req, nil)
		var msg struct {
			Content    []struct{ Text string }
			StopReason string `json:"stop_reason"`
			Usage      map[string]float64
		}
		if err := json.Unmarshal([]byte(body), &msg); err != nil || len(msg.Content) != 1 {
			t.Fatalf("%s: %s", c.name, body)
		}
		if msg.Content[0].Text != c.text || msg.StopReason != c.stop || msg.Usage["input_tokens"] != c.in {
			t.Fatalf("%s: got %q %s %v", c.name, msg.Content[0].Text, msg.StopReason, msg.Usage)
		}
		// The stream says the same thing.
		_, sbody := post(t, srv.URL+"/v1/messages", strings.Replace(req, "{", `{"stream":true,`, 1), nil)
		var text string
		for _, e := range readEvents(t, sbody) {
			if e.name == "content_block_delta" {
				text += e.data["delta"].(map[string]any)["text"].(string)
			}
		}
		if text != c.text {
			t.Fatalf("%s: streamed %q", c.name, text)
		}
		_, cbody := post(t, srv.URL+"/v1/messages/count_tokens", req, nil)
		if cbody != fmt.Sprintf(`{"input_tokens":%d}`, int(c.in)) {
			t.Fatalf("%s: count_tokens %s", c.name, cbody)
		}
	}
}

func TestValidation(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	u := srv.URL + "/v1/messages"
	for _, c := range []struct{ name, body, msg string }{
		{"invalid JSON", `nope`, "not valid JSON"},
		{"missing model", `{"max_tokens":5,"messages":[]}`, "model"},
		{"empty model", `{"model":"","max_tokens":5,"messages":[]}`, "model"},
		{"missing max_tokens", `{"model":"m","messages":[]}`, "max_tokens"},
		{"zero max_tokens", `{"model":"m","max_tokens":0,"messages":[]}`, "max_tokens"},
		{"missing messages", `{"model":"m","max_tokens":5}`, "messages"},
		{"bad role", `{"model":"m","max_tokens":5,"messages":[{"role":"system","content":"x"}]}`, "messages.0.role"},
		{"bad content", `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":7}]}`, "content"},
	} {
		res, body := post(t, u, c.body, nil)
		if res.StatusCode != 400 || errType(t, body) != "invalid_request_error" || !strings.Contains(body, c.msg) || res.Header.Get("request-id") == "" {
			t.Fatalf("%s: %d %s", c.name, res.StatusCode, body)
		}
	}
	res, body := post(t, srv.URL+"/v1/messages/count_tokens", `{"messages":[]}`, nil)
	if res.StatusCode != 400 || !strings.Contains(body, "model") {
		t.Fatalf("count_tokens without model: %d %s", res.StatusCode, body)
	}
	if res, body := send(t, "GET", u, "", nil); res.StatusCode != 405 || errType(t, body) != "invalid_request_error" || res.Header.Get("Allow") != "POST" {
		t.Fatalf("GET: %d %s", res.StatusCode, body)
	}
	if res, body := post(t, srv.URL+"/v1/nothing", `{}`, nil); res.StatusCode != 404 || errType(t, body) != "not_found_error" {
		t.Fatalf("unknown path: %d %s", res.StatusCode, body)
	}
	big := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"` + strings.Repeat("a ", maxBodyBytes/2) + `"}]}`
	if res, body := post(t, u, big, nil); res.StatusCode != 413 || errType(t, body) != "request_too_large" {
		t.Fatalf("oversized: %d %.200s", res.StatusCode, body)
	}
}

func TestAuthentication(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{APIKeys: []string{"k1", "k2"}})
	ok := `{"model":"m","max_tokens":5,"messages":[]}`
	for _, c := range []struct {
		name, path, key, version string
		status                   int
		typ                      string
	}{
		{"first key", "/v1/messages", "k1", "2023-06-01", 200, ""},
		{"second key", "/v1/messages", "k2", "2023-06-01", 200, ""},
		{"default key not accepted when keys are configured", "/v1/messages", DefaultAPIKey, "2023-06-01", 401, "authentication_error"},
		{"no key", "/v1/messages", "", "2023-06-01", 401, "authentication_error"},
		{"no version", "/v1/messages", "k1", "", 400, "invalid_request_error"},
		{"count_tokens checks the key", "/v1/messages/count_tokens", "bad", "2023-06-01", 401, "authentication_error"},
		{"models checks the key", "/v1/models", "bad", "2023-06-01", 401, "authentication_error"},
	} {
		method := "POST"
		if c.path == "/v1/models" {
			method = "GET"
		}
		res, body := send(t, method, srv.URL+c.path, ok, map[string]string{"x-api-key": c.key, "anthropic-version": c.version})
		if res.StatusCode != c.status || (c.typ != "" && errType(t, body) != c.typ) {
			t.Fatalf("%s: %d %s", c.name, res.StatusCode, body)
		}
	}
}

// Rate-limit headers count per account within a minute opened by the
// account's first request, on the sim's clock.
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	p, srv := newServer(t, Options{APIKeys: []string{"k1", "k2"}, Now: t0, RequestsPerMinute: 3, TokensPerMinute: 20})
	body := `{"model":"m","max_tokens":5,"messages":[{"role":"user","content":"a b c"}]}` // 3 in + 3 out
	check := func(key string, remaining, tokens string, reset time.Time) {
		t.Helper()
		res, b := post(t, srv.URL+"/v1/messages", body, map[string]string{"x-api-key": key})
		h := res.Header
		got := [6]string{h.Get("anthropic-ratelimit-requests-limit"), h.Get("anthropic-ratelimit-requests-remaining"), h.Get("anthropic-ratelimit-requests-reset"),
			h.Get("anthropic-ratelimit-tokens-limit"), h.Get("anthropic-ratelimit-tokens-remaining"), h.Get("anthropic-ratelimit-tokens-reset")}
		at := reset.Format(time.RFC3339)
		if res.StatusCode != 200 || got != [6]string{"3", remaining, at, "20", tokens, at} {
			t.Fatalf("%s: %d %v %s", key, res.StatusCode, got, b)
		}
	}
	check("k1", "2", "14", t0.Add(time.Minute))
	p.Advance(30 * time.Second)
	check("k1", "1", "8", t0.Add(time.Minute))
	check("k2", "2", "14", t0.Add(90*time.Second)) // its own account, its own window
	check("k1", "0", "2", t0.Add(time.Minute))
	check("k1", "0", "0", t0.Add(time.Minute)) // advertised, not enforced
	p.Advance(30 * time.Second)
	check("k1", "2", "14", t0.Add(2*time.Minute))
}

// Concurrent requests get distinct ids, and the recorder keeps all of them.
func TestConcurrentRequests(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{})
	const n = 40
	ids := make(chan string, 2*n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body := fmt.Sprintf(`{"model":"m","max_tokens":5,"stream":%v,"messages":[{"role":"user","content":"w%d"}]}`, i%2 == 0, i)
			res, err := http.DefaultClient.Do(newRequest(t, "POST", srv.URL+"/v1/messages", body, nil))
			if err != nil {
				errs <- err
				return
			}
			b, err := io.ReadAll(res.Body)
			res.Body.Close()
			at := strings.Index(string(b), `"id":"msg_sim_`)
			if err != nil || at < 0 {
				errs <- fmt.Errorf("%v: %s", err, b)
				return
			}
			ids <- res.Header.Get("request-id")
			ids <- string(b[at+6 : at+6+len("msg_sim_000000")])
		}()
	}
	wg.Wait()
	close(ids)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for id := range ids {
		if seen[id] {
			t.Fatalf("duplicate id %s", id)
		}
		seen[id] = true
	}
	if len(seen) != 2*n {
		t.Fatalf("%d ids", len(seen))
	}
	if len(p.Requests()) != n {
		t.Fatalf("recorded %d", len(p.Requests()))
	}
}

func TestModelsAndCatalog(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{})
	res, body := send(t, "GET", srv.URL+"/v1/models", "", nil)
	var list struct {
		Data []struct{ ID, Type string }
	}
	json.Unmarshal([]byte(body), &list)
	if res.StatusCode != 200 || len(list.Data) != len(Models) || list.Data[0].Type != "model" {
		t.Fatalf("models: %d %s", res.StatusCode, body)
	}
	get := func(etag string) (*http.Response, string) {
		return send(t, "GET", srv.URL+CatalogPath, "", map[string]string{"If-None-Match": etag})
	}
	res, body = get("")
	if res.StatusCode != 200 || !strings.Contains(body, `"version":"v1"`) || res.Header.Get("ETag") != `"v1"` {
		t.Fatalf("catalog: %d %s", res.StatusCode, body)
	}
	if res, _ := get(`"v1"`); res.StatusCode != 304 {
		t.Fatalf("conditional: %d", res.StatusCode)
	}
	p.SetCatalogVersion(2)
	if res, body := get(`"v1"`); res.StatusCode != 200 || !strings.Contains(body, `"version":"v2"`) {
		t.Fatalf("new version: %d %s", res.StatusCode, body)
	}
}

func TestTokenizer(t *testing.T) {
	t.Parallel()
	for s, n := range map[string]int{"": 0, "   ": 0, "a": 1, " a  b\tc\nd ": 4, "héllo wörld": 2, "a\u00a0b": 2} {
		if got := CountTokens(s); got != n {
			t.Errorf("CountTokens(%q) = %d, want %d", s, got, n)
		}
	}
	w, cut := firstWords(" a b  c ", 2)
	if strings.Join(w, ",") != "a,b" || !cut {
		t.Fatalf("firstWords: %v %v", w, cut)
	}
	if w, cut := firstWords("a b ", 2); len(w) != 2 || cut {
		t.Fatalf("firstWords at the limit: %v %v", w, cut)
	}
}

// A forced tool (tool_choice "tool", or "any": the first tool) is called
// with the echoed words as its input, streamed in two partial JSON parts.
func TestForcedToolCall(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	ctx := context.Background()
	c := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(DefaultAPIKey), option.WithMaxRetries(0))
	tools := []anthropic.ToolUnionParam{
		{OfTool: &anthropic.ToolParam{Name: "first", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"text": map[string]any{"type": "string"}}}}},
		{OfTool: &anthropic.ToolParam{Name: "second", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{}}}},
	}
	for choice, want := range map[string]anthropic.ToolChoiceUnionParam{
		"first":  {OfAny: &anthropic.ToolChoiceAnyParam{}},
		"second": anthropic.ToolChoiceParamOfTool("second"),
	} {
		params := anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 8, Tools: tools, ToolChoice: want,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("look this up"))}}
		msg, err := c.Messages.New(ctx, params)
		if err != nil {
			t.Fatal(err)
		}
		if len(msg.Content) != 1 || msg.Content[0].Type != "tool_use" || msg.Content[0].Name != choice ||
			string(msg.Content[0].Input) != `{"text":"look this up"}` || msg.StopReason != anthropic.StopReasonToolUse || msg.Usage.OutputTokens != 3 {
			t.Fatalf("%s: message %+v", choice, msg)
		}
		stream := c.Messages.NewStreaming(ctx, params)
		var acc anthropic.Message
		for stream.Next() {
			if err := acc.Accumulate(stream.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if err := stream.Err(); err != nil {
			t.Fatal(err)
		}
		if len(acc.Content) != 1 || acc.Content[0].Name != choice || string(acc.Content[0].Input) != `{"text":"look this up"}` || acc.StopReason != anthropic.StopReasonToolUse {
			t.Fatalf("%s: streamed %+v", choice, acc)
		}
	}
	// Without a forced choice the answer stays text.
	msg, err := c.Messages.New(ctx, anthropic.MessageNewParams{Model: "claude-sim", MaxTokens: 8, Tools: tools,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("just talk"))}})
	if err != nil || msg.Content[0].Type != "text" || msg.StopReason != anthropic.StopReasonEndTurn {
		t.Fatalf("auto: %+v %v", msg, err)
	}
}
