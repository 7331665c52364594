package provider

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
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

func post(t *testing.T, url, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", url, strings.NewReader(body))
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
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	return res, string(b)
}

func errType(t *testing.T, body string) string {
	t.Helper()
	var e struct {
		Type  string
		Error struct{ Type string }
	}
	if json.Unmarshal([]byte(body), &e) != nil || e.Type != "error" {
		t.Fatalf("not an Anthropic error: %s", body)
	}
	return e.Error.Type
}

// The official SDK reads the sim's answers, streaming and not.
func TestOfficialSDK(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	c := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey(DefaultAPIKey), option.WithMaxRetries(0))
	params := anthropic.MessageNewParams{
		Model: "claude-sim", MaxTokens: 3,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two three four five"))},
	}
	msg, err := c.Messages.New(context.Background(), params)
	if err != nil {
		t.Fatal(err)
	}
	if msg.Content[0].Text != "one two three" || msg.StopReason != "max_tokens" || msg.Usage.InputTokens != 5 || msg.Usage.OutputTokens != 3 {
		t.Fatalf("message %+v", msg)
	}
	stream := c.Messages.NewStreaming(context.Background(), params)
	var acc anthropic.Message
	events := 0
	for stream.Next() {
		events++
		if err := acc.Accumulate(stream.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := stream.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != "one two three" || acc.Usage.OutputTokens != 3 || events < 8 {
		t.Fatalf("streamed %+v after %d events", acc, events)
	}
	bad := anthropic.NewClient(option.WithBaseURL(srv.URL), option.WithAPIKey("wrong"), option.WithMaxRetries(0))
	_, err = bad.Messages.New(context.Background(), params)
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 {
		t.Fatalf("bad key: %v", err)
	}
}

func TestStreamingEventOrder(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{})
	res, body := post(t, srv.URL+"/v1/messages", `{"model":"m","max_tokens":10,"stream":true,"messages":[{"role":"user","content":"a b"}]}`, nil)
	if res.Header.Get("Content-Type") != "text/event-stream" || res.Header.Get("request-id") == "" {
		t.Fatalf("headers %v", res.Header)
	}
	var events []string
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if ev, ok := strings.CutPrefix(sc.Text(), "event: "); ok {
			events = append(events, ev)
		}
	}
	want := "message_start content_block_start ping content_block_delta content_block_delta content_block_stop message_delta message_stop"
	if strings.Join(events, " ") != want {
		t.Fatalf("events %v", events)
	}
}

func TestValidationAndAuth(t *testing.T) {
	t.Parallel()
	_, srv := newServer(t, Options{APIKeys: []string{"k1"}})
	u := srv.URL + "/v1/messages"
	ok := `{"model":"m","max_tokens":5,"messages":[]}`
	for _, c := range []struct {
		body   string
		hdr    map[string]string
		status int
		typ    string
	}{
		{ok, nil, 401, "authentication_error"}, // default key not accepted when keys are configured
		{ok, map[string]string{"x-api-key": "k1", "anthropic-version": ""}, 400, "invalid_request_error"},
		{`{"max_tokens":5,"messages":[]}`, map[string]string{"x-api-key": "k1"}, 400, "invalid_request_error"},
		{`{"model":"m","messages":[]}`, map[string]string{"x-api-key": "k1"}, 400, "invalid_request_error"},
		{`{"model":"m","max_tokens":5}`, map[string]string{"x-api-key": "k1"}, 400, "invalid_request_error"},
		{`nope`, map[string]string{"x-api-key": "k1"}, 400, "invalid_request_error"},
	} {
		res, body := post(t, u, c.body, c.hdr)
		if res.StatusCode != c.status || errType(t, body) != c.typ {
			t.Fatalf("%s %v: %d %s", c.body, c.hdr, res.StatusCode, body)
		}
	}
	res, body := post(t, srv.URL+"/v1/messages/count_tokens", `{"model":"m","messages":[{"role":"user","content":"x y z"}]}`, map[string]string{"x-api-key": "k1"})
	if res.StatusCode != 200 || body != `{"input_tokens":3}` {
		t.Fatalf("count_tokens %d %s", res.StatusCode, body)
	}
	res, _ = post(t, u, ok, map[string]string{"x-api-key": "k1"})
	if res.Header.Get("anthropic-ratelimit-requests-limit") == "" {
		t.Fatal("no rate-limit headers")
	}
}

func TestFaultsRecordingAndClock(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{Now: time.Unix(1000, 0)})
	u := srv.URL + "/v1/messages"
	body := `{"model":"m","max_tokens":5,"stream":true,"messages":[{"role":"user","content":"a b c"}]}`
	control := func(method, path, b string) string {
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(b))
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		out, _ := io.ReadAll(res.Body)
		if res.StatusCode >= 300 {
			t.Fatalf("%s %s: %d %s", method, path, res.StatusCode, out)
		}
		return string(out)
	}
	control("POST", "/_sim/faults", `{"path":"/v1/messages","count":1,"status":429,"retry_after":7}`)
	res, b := post(t, u, body, nil)
	if res.StatusCode != 429 || errType(t, b) != "rate_limit_error" || res.Header.Get("retry-after") != "7" {
		t.Fatalf("429 fault: %d %s", res.StatusCode, b)
	}
	if res, _ := post(t, u, body, nil); res.StatusCode != 200 {
		t.Fatal("count-limited fault persisted")
	}
	res, b = post(t, u, body, map[string]string{"x-sim-fault": "status=529"})
	if res.StatusCode != 529 || errType(t, b) != "overloaded_error" {
		t.Fatalf("header fault: %d %s", res.StatusCode, b)
	}
	// Dropped connection before headers: the client sees a transport error.
	req, _ := http.NewRequest("POST", u, strings.NewReader(body))
	req.Header.Set("x-sim-fault", "drop_before_headers=true")
	if _, err := http.DefaultClient.Do(req); err == nil {
		t.Fatal("dropped connection answered")
	}
	// Dropped mid-stream after 2 events: a truncated stream.
	req, _ = http.NewRequest("POST", u, strings.NewReader(body))
	req.Header.Set("x-api-key", DefaultAPIKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-sim-fault", "drop_after_events=2")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	got, rerr := io.ReadAll(res.Body)
	res.Body.Close()
	if rerr == nil || strings.Count(string(got), "event: ") != 2 {
		t.Fatalf("mid-stream drop: err=%v events=%d", rerr, strings.Count(string(got), "event: "))
	}
	start := time.Now()
	if res, _ := post(t, u, body, map[string]string{"x-sim-fault": "latency_ms=150"}); res.StatusCode != 200 || time.Since(start) < 150*time.Millisecond {
		t.Fatal("latency fault not applied")
	}

	recs := p.Requests()
	if len(recs) != 6 || recs[0].Path != "/v1/messages" || !strings.Contains(recs[0].Body, `"max_tokens":5`) || recs[0].Header.Get("X-Api-Key") != DefaultAPIKey {
		t.Fatalf("recorded %d: %+v", len(recs), recs[0])
	}
	if !strings.Contains(control("GET", "/_sim/requests", ""), `"path":"/v1/messages"`) {
		t.Fatal("control listing")
	}
	control("DELETE", "/_sim/requests", "")
	if len(p.Requests()) != 0 {
		t.Fatal("not cleared")
	}
	if c := control("POST", "/_sim/clock", `{"advance_secs":60}`); !strings.Contains(c, `"now_unix":1060`) {
		t.Fatalf("clock %s", c)
	}
	if c := control("POST", "/_sim/clock", `{"now_unix":5}`); !strings.Contains(c, `"now_unix":5`) {
		t.Fatalf("clock %s", c)
	}
	control("POST", "/_sim/reset", "")
	if p.Now().Unix() < 1_700_000_000 {
		t.Fatal("reset did not restore the wall clock")
	}
}

func TestModelsAndCatalog(t *testing.T) {
	t.Parallel()
	p, srv := newServer(t, Options{})
	req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
	req.Header.Set("x-api-key", DefaultAPIKey)
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var list struct {
		Data []struct{ ID, Type string }
	}
	json.NewDecoder(res.Body).Decode(&list)
	res.Body.Close()
	if res.StatusCode != 200 || len(list.Data) != len(Models) || list.Data[0].Type != "model" {
		t.Fatalf("models: %d %+v", res.StatusCode, list)
	}
	get := func(etag string) (*http.Response, string) {
		req, _ := http.NewRequest("GET", srv.URL+CatalogPath, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(res.Body)
		res.Body.Close()
		return res, string(b)
	}
	res, body := get("")
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
