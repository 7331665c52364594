package relay

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

// chatUpstream answers like a provider, as the request's X-Test-Reply
// header tells it (the relay passes the client's headers on): "cut" stops a
// stream after its first text, "429" rate-limits; it keeps every request.
type chatUpstream struct {
	mu     sync.Mutex
	bodies []string
	hdrs   []http.Header
	paths  []string
}

func (c *chatUpstream) last(t *testing.T) (string, http.Header, string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.bodies) == 0 {
		t.Fatal("the upstream saw no request")
	}
	n := len(c.bodies) - 1
	return c.bodies[n], c.hdrs[n], c.paths[n]
}

func (c *chatUpstream) count() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.bodies)
}

func (c *chatUpstream) serve(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		c.mu.Lock()
		c.bodies, c.hdrs, c.paths = append(c.bodies, string(body)), append(c.hdrs, r.Header.Clone()), append(c.paths, r.URL.RequestURI())
		c.mu.Unlock()
		if r.URL.Path == "/v1/models" {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"data":[{"type":"model","id":"claude-a","created_at":"2025-02-19T00:00:00Z"},{"type":"model","id":"gpt-x","created_at":"2025-02-19T00:00:00Z"}],"has_more":false,"first_id":"claude-a","last_id":"gpt-x"}`)
			return
		}
		reply := r.Header.Get("X-Test-Reply")
		if reply == "429" {
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("Retry-After", "17")
			w.WriteHeader(429)
			io.WriteString(w, `{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}`)
			return
		}
		if !strings.Contains(string(body), `"stream":true`) {
			w.Header().Set("Content-Type", "application/json")
			io.WriteString(w, `{"id":"msg_7","type":"message","role":"assistant","model":"claude-test","content":[{"type":"text","text":"hello there"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2,"cache_read_input_tokens":4}}`)
			return
		}
		w.Header().Set("Content-Type", "text/event-stream")
		events := []string{
			`{"type":"message_start","message":{"id":"msg_8","model":"claude-test","usage":{"input_tokens":9,"cache_read_input_tokens":6,"output_tokens":1}}}`,
			`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
			`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"hi"}}`,
			`{"type":"content_block_stop","index":0}`,
			`{"type":"message_delta","delta":{"stop_reason":"max_tokens"},"usage":{"output_tokens":3}}`,
			`{"type":"message_stop"}`,
		}
		if reply == "cut" {
			events = events[:3]
		}
		for _, e := range events {
			var typ struct{ Type string }
			json.Unmarshal([]byte(e), &typ)
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", typ.Type, e)
			w.(http.Flusher).Flush()
		}
		if reply == "cut" {
			panic(http.ErrAbortHandler) // the connection drops mid-stream
		}
	}))
	t.Cleanup(srv.Close)
	return srv
}

func chatSetup(t *testing.T) (*chatUpstream, *httptest.Server, *memRecorder) {
	up := &chatUpstream{}
	u := up.serve(t)
	rec := &memRecorder{}
	srv := newTestHandler(fixture(apiKeyUpstream("up_1", u.URL, "sk-upstream")), rec)
	t.Cleanup(srv.Close)
	return up, srv, rec
}

type openAIError struct {
	Error struct {
		Message string  `json:"message"`
		Type    string  `json:"type"`
		Param   *string `json:"param"`
		Code    *string `json:"code"`
	} `json:"error"`
}

func wantOpenAIError(t *testing.T, resp *http.Response, body string, status int, code string) openAIError {
	t.Helper()
	var e openAIError
	if resp.StatusCode != status || json.Unmarshal([]byte(body), &e) != nil || e.Error.Message == "" || e.Error.Code == nil || *e.Error.Code != code {
		t.Fatalf("status %d body %s: want %d with code %s", resp.StatusCode, body, status, code)
	}
	if resp.Header.Get("Content-Length") != fmt.Sprint(len(body)) {
		t.Fatalf("Content-Length %s for %d bytes", resp.Header.Get("Content-Length"), len(body))
	}
	return e
}

// An OpenAI client's chat request, sent with the principal's issued key as
// a bearer token, goes upstream as a Messages request and comes back as a
// chat completion; the request event carries its usage as for Messages.
func TestChatCompletionCreate(t *testing.T) {
	t.Parallel()
	up, srv, rec := chatSetup(t)
	resp, b := post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good", "OpenAI-Organization": "org-1"},
		`{"model":"claude-test","messages":[{"role":"system","content":"be kind"},{"role":"user","content":"hello"}],"max_completion_tokens":20}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Length") != fmt.Sprint(len(b)) {
		t.Fatalf("%d %v %s", resp.StatusCode, resp.Header, b)
	}
	var c struct {
		ID      string `json:"id"`
		Object  string `json:"object"`
		Choices []struct {
			Message struct {
				Role, Content string
			} `json:"message"`
			FinishReason string `json:"finish_reason"`
		} `json:"choices"`
		Usage struct {
			PromptTokens        int `json:"prompt_tokens"`
			CompletionTokens    int `json:"completion_tokens"`
			PromptTokensDetails struct {
				CachedTokens int `json:"cached_tokens"`
			} `json:"prompt_tokens_details"`
		} `json:"usage"`
	}
	if err := json.Unmarshal([]byte(b), &c); err != nil || c.Object != "chat.completion" || c.ID != "chatcmpl-7" || len(c.Choices) != 1 ||
		c.Choices[0].Message.Content != "hello there" || c.Choices[0].FinishReason != "stop" ||
		c.Usage.PromptTokens != 9 || c.Usage.CompletionTokens != 2 || c.Usage.PromptTokensDetails.CachedTokens != 4 {
		t.Fatalf("completion %s", b)
	}
	body, hdr, path := up.last(t)
	if path != "/v1/messages" || hdr.Get("Anthropic-Version") != "2023-06-01" || hdr.Get("X-Api-Key") != "sk-upstream" ||
		hdr.Get("Authorization") != "" || hdr.Get("Openai-Organization") != "" {
		t.Fatalf("upstream request %s %v", path, hdr)
	}
	if !strings.Contains(body, `"system":[{"type":"text","text":"be kind"`) || !strings.Contains(body, `"max_tokens":20`) {
		t.Fatalf("upstream body %s", body)
	}
	evs := rec.wait(t, 1)
	if len(evs) != 1 || evs[0].Status != 200 || evs[0].KeyID != "key_a" || evs[0].Model != "claude-test" || evs[0].InputTokens != 5 || evs[0].OutputTokens != 2 || evs[0].CacheReadInputTokens != 4 {
		t.Fatalf("events %+v", evs)
	}
}

// Streaming: chunks, the usage chunk asked for, then [DONE]; the request
// event reads the usage of the upstream's stream.
func TestChatCompletionStream(t *testing.T) {
	t.Parallel()
	_, srv, rec := chatSetup(t)
	resp, b := post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"},
		`{"model":"claude-test","messages":[{"role":"user","content":"hello"}],"stream":true,"stream_options":{"include_usage":true}}`)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("%d %v", resp.StatusCode, resp.Header)
	}
	var content, finish string
	var usage struct {
		PromptTokens     int `json:"prompt_tokens"`
		CompletionTokens int `json:"completion_tokens"`
	}
	if !strings.HasSuffix(b, "data: [DONE]\n\n") {
		t.Fatalf("stream does not end with [DONE]: %s", b)
	}
	sc := bufio.NewScanner(strings.NewReader(b))
	for sc.Scan() {
		d, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || d == "[DONE]" {
			continue
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage *json.RawMessage `json:"usage"`
		}
		if err := json.Unmarshal([]byte(d), &ch); err != nil {
			t.Fatalf("chunk %s", d)
		}
		for _, c := range ch.Choices {
			content += c.Delta.Content
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if ch.Usage != nil {
			json.Unmarshal(*ch.Usage, &usage)
		}
	}
	if content != "hi" || finish != "length" || usage.PromptTokens != 15 || usage.CompletionTokens != 3 {
		t.Fatalf("content %q finish %q usage %+v in %s", content, finish, usage, b)
	}
	evs := rec.wait(t, 1)
	if len(evs) != 1 || !evs[0].Stream || evs[0].InputTokens != 9 || evs[0].OutputTokens != 3 {
		t.Fatalf("events %+v", evs)
	}
}

// A stream the upstream cuts ends with an error payload, never [DONE].
func TestChatCompletionStreamCut(t *testing.T) {
	t.Parallel()
	_, srv, rec := chatSetup(t)
	req, _ := http.NewRequest("POST", srv.URL+"/v1/chat/completions", strings.NewReader(`{"model":"claude-test","messages":[{"role":"user","content":"hello"}],"stream":true}`))
	req.Header.Set("Authorization", "Bearer sk-good")
	req.Header.Set("X-Test-Reply", "cut")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body) // the relay aborts the connection after the error
	resp.Body.Close()
	text := string(b)
	if strings.Contains(text, "[DONE]") || !strings.Contains(text, `"content":"hi"`) {
		t.Fatalf("stream %s", text)
	}
	i := strings.LastIndex(text, "data: ")
	var e openAIError
	if json.Unmarshal([]byte(strings.TrimSpace(text[i+6:])), &e) != nil || e.Error.Message == "" {
		t.Fatalf("last payload is not an error: %s", text)
	}
	evs := rec.wait(t, 1)
	if len(evs) != 1 || evs[0].ErrorType != "stream_interrupted" {
		t.Fatalf("events %+v", evs)
	}
}

// Refusals answer in OpenAI's shape with the same statuses as Messages,
// and those after authentication are recorded for the principal.
func TestChatCompletionRefusals(t *testing.T) {
	t.Parallel()
	up, srv, rec := chatSetup(t)
	ok := `{"model":"claude-test","messages":[{"role":"user","content":"x"}]}`
	resp, b := post(t, srv.URL+"/v1/chat/completions", nil, ok)
	wantOpenAIError(t, resp, b, 401, "invalid_api_key")
	resp, b = post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-wrong"}, ok)
	wantOpenAIError(t, resp, b, 401, "invalid_api_key")
	resp, b = post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"}, `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)
	wantOpenAIError(t, resp, b, 403, "permission_denied")
	resp, b = post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"}, `{"model":"claude-test","messages":[{"role":"user","content":"x"}],"n":2}`)
	if e := wantOpenAIError(t, resp, b, 400, "unsupported_parameter"); e.Error.Param == nil || *e.Error.Param != "n" || e.Error.Type != "invalid_request_error" {
		t.Fatalf("n=2: %s", b)
	}
	if up.count() != 0 {
		t.Fatalf("refused requests reached the upstream %d times", up.count())
	}
	// The upstream's 429 keeps its status and retry advice.
	resp, b = post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good", "X-Test-Reply": "429"}, ok)
	wantOpenAIError(t, resp, b, 429, "rate_limit_exceeded")
	if resp.Header.Get("Retry-After") != "17" {
		t.Fatalf("Retry-After %q", resp.Header.Get("Retry-After"))
	}
	resp, b = post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"}, ok[:10])
	wantOpenAIError(t, resp, b, 400, "invalid_json")
	resp, b = post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good"}, `{"model":"claude-test","messages":[{"role":"user","content":"x"}],"stream":true,"seed":1}`)
	wantOpenAIError(t, resp, b, 400, "unsupported_parameter")

	evs := rec.wait(t, 5)
	byStatus := map[int]store.RequestEvent{}
	for _, e := range evs {
		byStatus[e.Status] = e
	}
	if e := byStatus[403]; e.PrincipalID != "pr_a" || e.ErrorType != "permission_error" || e.Model != "gpt-4o" {
		t.Fatalf("403 event %+v", e)
	}
	if e := byStatus[400]; e.PrincipalID != "pr_a" || e.ErrorType != "invalid_request_error" {
		t.Fatalf("400 event %+v", e)
	}
	if e := byStatus[429]; e.ErrorType != "rate_limit_error" || e.UpstreamID != "up_1" {
		t.Fatalf("429 event %+v", e)
	}
}

// GET /v1/models answers in OpenAI's shape when asked without
// anthropic-version, in Anthropic's otherwise; both list only the
// principal's models.
func TestModelsInOpenAIDialect(t *testing.T) {
	t.Parallel()
	up, srv, _ := chatSetup(t)
	get := func(hdr map[string]string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, string(b)
	}
	resp, b := get(map[string]string{"Authorization": "Bearer sk-good"})
	if resp.StatusCode != 200 || b != `{"object":"list","data":[{"id":"claude-a","object":"model","created":1739923200,"owned_by":"anthropic"}]}` {
		t.Fatalf("OpenAI dialect: %d %s", resp.StatusCode, b)
	}
	_, hdr, path := up.last(t)
	if path != "/v1/models?limit=1000" || hdr.Get("Anthropic-Version") != "2023-06-01" {
		t.Fatalf("upstream asked %s %v", path, hdr)
	}
	resp, b = get(map[string]string{"Authorization": "Bearer sk-good", "anthropic-version": "2023-06-01"})
	if resp.StatusCode != 200 || !strings.Contains(b, `"first_id":"claude-a"`) || strings.Contains(b, "gpt-x") {
		t.Fatalf("Anthropic dialect: %d %s", resp.StatusCode, b)
	}
	resp, b = get(map[string]string{"Authorization": "Bearer sk-bad"})
	wantOpenAIError(t, resp, b, 401, "invalid_api_key")
}

// Requests in OpenAI's dialect count in the proxy's request series and in
// their own by endpoint and outcome; a cut stream counts as an error.
func TestOpenAIMetrics(t *testing.T) {
	t.Parallel()
	up := &chatUpstream{}
	u := up.serve(t)
	m := NewMetrics(prometheus.NewRegistry())
	srv := httptest.NewServer(New(Options{Source: fakeSource{fixture(apiKeyUpstream("up_1", u.URL, "sk-upstream"))}, Recorder: &memRecorder{}, Metrics: m}))
	t.Cleanup(srv.Close)
	auth := map[string]string{"Authorization": "Bearer sk-good"}
	post(t, srv.URL+"/v1/chat/completions", auth, `{"model":"claude-test","messages":[{"role":"user","content":"x"}]}`)
	post(t, srv.URL+"/v1/chat/completions", auth, `{"model":"claude-test","messages":[{"role":"user","content":"x"}],"n":2}`)
	post(t, srv.URL+"/v1/chat/completions", map[string]string{"Authorization": "Bearer sk-good", "X-Test-Reply": "cut"}, `{"model":"claude-test","messages":[{"role":"user","content":"x"}],"stream":true}`)
	req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer sk-good")
	if resp, err := http.DefaultClient.Do(req); err == nil {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, c := range []struct {
		endpoint, outcome int
		want              float64
	}{{openAIChat, 0, 1}, {openAIChat, 1, 2}, {openAIModels, 0, 1}, {openAIModels, 1, 0}} {
		if got := testutil.ToFloat64(m.openAI[c.endpoint][c.outcome]); got != c.want {
			t.Errorf("openai counter [%d][%d] = %v, want %v", c.endpoint, c.outcome, got, c.want)
		}
	}
}

// A request event names the dialect the client spoke, so the request log
// tells OpenAI clients from Messages clients: an answered chat request, a
// chat request refused after authentication, and a Messages request.
func TestRequestEventsNameTheDialect(t *testing.T) {
	t.Parallel()
	_, srv, rec := chatSetup(t)
	auth := map[string]string{"Authorization": "Bearer sk-good"}
	post(t, srv.URL+"/v1/chat/completions", auth, `{"model":"claude-test","messages":[{"role":"user","content":"x"}]}`)
	post(t, srv.URL+"/v1/chat/completions", auth, `{"model":"gpt-4o","messages":[{"role":"user","content":"x"}]}`)
	post(t, srv.URL+"/v1/messages", map[string]string{"x-api-key": "sk-good", "anthropic-version": "2023-06-01"},
		`{"model":"claude-test","max_tokens":5,"messages":[{"role":"user","content":"x"}]}`)
	byModel := map[string][]string{}
	for _, e := range rec.wait(t, 3) {
		byModel[e.Model] = append(byModel[e.Model], e.Dialect)
	}
	if d := byModel["gpt-4o"]; len(d) != 1 || d[0] != store.DialectOpenAI {
		t.Fatalf("refused chat request's dialect %q", d)
	}
	if d := byModel["claude-test"]; len(d) != 2 || !slices.Contains(d, store.DialectOpenAI) || !slices.Contains(d, store.DialectMessages) {
		t.Fatalf("answered requests' dialects %q, want one of each", d)
	}
}
