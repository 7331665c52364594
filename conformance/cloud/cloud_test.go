// Package cloud_test drives the gateway's Bedrock and Vertex transports
// (impl/gateway/cloud) with the Anthropic Go SDK against the simulator's
// Bedrock and Vertex endpoints, in-process: signatures are made by the AWS
// SDK and checked by it again in the sim, tokens come from the sim's token
// endpoint through golang.org/x/oauth2/google.
package cloud_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/oauth2"

	// The conformance run passes -bin-dir to every package.
	_ "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/testing/promtest"
	"github.com/pillarhq/pillar/sim/provider"
)

const (
	alias     = "claude-sonnet-4-5"
	bedrockID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
	vertexID  = "claude-sonnet-4-5@20250929"
)

func startSim(t *testing.T) (*provider.Provider, *httptest.Server) {
	t.Helper()
	p := provider.New(provider.Options{})
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return p, srv
}

func bedrockTransport(url, secret string) *cloud.Bedrock {
	return &cloud.Bedrock{
		Endpoint: url, Region: "us-east-1",
		Credentials: cloud.StaticAWSCredentials{AccessKeyID: provider.DefaultAWSAccessKeyID, SecretAccessKey: secret}.Provider(),
		Models:      map[string]string{alias: bedrockID},
		Next:        http.DefaultTransport,
	}
}

// countingTransport counts the requests to one path.
type countingTransport struct {
	path string
	n    atomic.Int32
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == c.path {
		c.n.Add(1)
	}
	return http.DefaultTransport.RoundTrip(r)
}

func vertexTransport(t *testing.T, p *provider.Provider, url string) (*cloud.Vertex, *countingTransport) {
	t.Helper()
	next := &countingTransport{path: provider.VertexTokenPath}
	ts, err := cloud.VertexTokens(context.Background(), p.ServiceAccountJSON(url), next, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return &cloud.Vertex{Endpoint: url, Project: "sim-project", Region: "us-east5", Tokens: ts,
		Models: map[string]string{alias: vertexID}, Next: next}, next
}

// sdk is the Anthropic SDK sending through rt, as the relay would.
func sdk(rt http.RoundTripper) *anthropic.Client {
	c := anthropic.NewClient(option.WithBaseURL("http://upstream.invalid"), option.WithAPIKey("unused"),
		option.WithHTTPClient(&http.Client{Transport: rt}), option.WithMaxRetries(0))
	return &c
}

func params(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: alias, MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

func TestBedrockCreateSignedWithTheSDK(t *testing.T) {
	p, srv := startSim(t)
	msg, err := sdk(bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey)).Messages.New(context.Background(), params("hello bedrock"))
	if err != nil {
		t.Fatal(err)
	}
	if got := msg.Content[0].Text; got != "hello bedrock" || msg.Usage.InputTokens != 2 || msg.Usage.OutputTokens != 2 {
		t.Fatalf("answer %q usage %+v", got, msg.Usage)
	}
	// The alias reached Bedrock as the upstream's id, in the path.
	reqs := p.Requests()
	if got := reqs[len(reqs)-1].Header.Get("X-Sim-Cloud-Path"); got != "/model/"+bedrockID+"/invoke" {
		t.Fatalf("Bedrock path %q", got)
	}
	// The answer names the model as the client did, not as Bedrock does.
	if msg.Model != alias {
		t.Fatalf("model %q", msg.Model)
	}
}

func TestBedrockWrongSecretIsAnAuthenticationError(t *testing.T) {
	_, srv := startSim(t)
	_, err := sdk(bedrockTransport(srv.URL, "not-the-secret")).Messages.New(context.Background(), params("hi"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || !strings.Contains(apiErr.RawJSON(), "authentication_error") ||
		!strings.Contains(apiErr.RawJSON(), "InvalidSignatureException") {
		t.Fatalf("want 401 authentication_error from InvalidSignatureException, got %v", err)
	}
}

var msgID = regexp.MustCompile(`msg_sim_\d+`)

// directStream is the sim's own /v1/messages stream for the same request.
func directStream(t *testing.T, url, text string) string {
	t.Helper()
	b := `{"model":"` + bedrockID + `","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"` + text + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, url+"/v1/messages", strings.NewReader(b))
	req.Header.Set("X-Api-Key", provider.DefaultAPIKey)
	req.Header.Set("Anthropic-Version", "2023-06-01")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return msgID.ReplaceAllString(string(raw), "msg")
}

func rawStream(t *testing.T, rt http.RoundTripper, text string) (*http.Response, string, error) {
	t.Helper()
	b := `{"model":"` + alias + `","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"` + text + `"}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://upstream.invalid/v1/messages", strings.NewReader(b))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(b)), nil }
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	return resp, msgID.ReplaceAllString(string(raw), "msg"), err
}

func TestBedrockStreamIsByteFaithful(t *testing.T) {
	_, srv := startSim(t)
	resp, got, err := rawStream(t, bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey), "one two three")
	if err != nil {
		t.Fatal(err)
	}
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("content type %q", ct)
	}
	// Byte for byte the API's stream, but for message_start's model: the
	// client's name.
	if want := strings.Replace(directStream(t, srv.URL, "one two three"), bedrockID, alias, 1); got != want {
		t.Fatalf("stream differs from the Anthropic API's:\n got %q\nwant %q", got, want)
	}
}

func TestBedrockStreamWithTheSDK(t *testing.T) {
	_, srv := startSim(t)
	s := sdk(bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey)).Messages.NewStreaming(context.Background(), params("streamed through bedrock"))
	var acc anthropic.Message
	for s.Next() {
		if err := acc.Accumulate(s.Current()); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	if acc.Content[0].Text != "streamed through bedrock" || acc.StopReason != "end_turn" || acc.Usage.OutputTokens != 3 || acc.Model != alias {
		t.Fatalf("accumulated %+v", acc)
	}
}

func TestBedrockToolUse(t *testing.T) {
	_, srv := startSim(t)
	pr := params("call it")
	pr.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "echo", InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"text": map[string]any{"type": "string"}}}}}}
	pr.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "echo"}}
	msg, err := sdk(bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey)).Messages.New(context.Background(), pr)
	if err != nil {
		t.Fatal(err)
	}
	if msg.StopReason != "tool_use" || msg.Content[0].Name != "echo" || string(msg.Content[0].Input) != `{"text":"call it"}` {
		t.Fatalf("tool answer %+v", msg)
	}
}

func TestBedrockThrottlingIsARateLimitWithACooldown(t *testing.T) {
	p, srv := startSim(t)
	if err := p.AddFault(provider.Fault{Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	b := `{"model":"` + alias + `","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`
	req, _ := http.NewRequest(http.MethodPost, "http://upstream.invalid/v1/messages", strings.NewReader(b))
	reg := prometheus.NewRegistry()
	rt := bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey)
	rt.Metrics = cloud.NewMetrics(reg)
	resp, err := rt.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	var e struct {
		Type  string `json:"type"`
		Error struct{ Type, Message string }
	}
	if resp.StatusCode != 429 || json.Unmarshal(raw, &e) != nil || e.Type != "error" || e.Error.Type != "rate_limit_error" ||
		!strings.Contains(e.Error.Message, "ThrottlingException") {
		t.Fatalf("got %d %s", resp.StatusCode, raw)
	}
	now := time.Unix(1_800_000_000, 0)
	if until, ok := routing.CooldownUntil(resp.StatusCode, resp.Header, now); !ok || !until.After(now) {
		t.Fatal("a throttled Bedrock upstream is not cooled down")
	}
	if n := counted(t, reg, "bedrock", "ThrottlingException"); n != 1 {
		t.Fatalf("svc_proxy_cloud_requests_total{bedrock,ThrottlingException} = %v", n)
	}
}

// counted is svc_proxy_cloud_requests_total{kind,outcome} in reg (0
// before it exists).
func counted(t *testing.T, reg *prometheus.Registry, kind, outcome string) float64 {
	t.Helper()
	fs, err := promtest.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	v, _ := fs.Value("svc_proxy_cloud_requests_total", "kind", kind, "outcome", outcome)
	return v
}

func TestBedrockStreamExceptionIsAnErrorEvent(t *testing.T) {
	p, srv := startSim(t)
	if err := p.AddFault(provider.Fault{ErrorAfterEvents: 3, ErrorType: "rate_limit_error", Count: 1}); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	rt := bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey)
	rt.Metrics = cloud.NewMetrics(reg)
	_, got, err := rawStream(t, rt, "a b c d")
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(got, "event: error\n")
	if i < 0 || strings.Count(got, "event: ") != 4 || !strings.Contains(got[i:], `"type":"rate_limit_error"`) || !strings.HasSuffix(got, "\n\n") {
		t.Fatalf("stream %q", got)
	}
	if counted(t, reg, "bedrock", "ok") != 1 || counted(t, reg, "bedrock", "stream_throttlingException") != 1 {
		t.Fatal("the stream's exception was not counted")
	}
}

func TestBedrockStreamCutIsAReadError(t *testing.T) {
	p, srv := startSim(t)
	if err := p.AddFault(provider.Fault{DropAfterEvents: 2, Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, got, err := rawStream(t, bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey), "a b c d")
	if err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("a cut stream read to its end without error: %q", got)
	}
	if strings.Count(got, "event: ") != 2 {
		t.Fatalf("events before the cut: %q", got)
	}
}

func TestBedrockCountTokens(t *testing.T) {
	_, srv := startSim(t)
	n, err := sdk(bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey)).Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model: alias, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count these four words"))}})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != 4 {
		t.Fatalf("input_tokens %d", n.InputTokens)
	}
}

func TestVertexCreateWithServiceAccountToken(t *testing.T) {
	p, srv := startSim(t)
	rt, next := vertexTransport(t, p, srv.URL)
	c := sdk(rt)
	for range 2 {
		msg, err := c.Messages.New(context.Background(), params("hello vertex"))
		if err != nil {
			t.Fatal(err)
		}
		if msg.Content[0].Text != "hello vertex" || msg.Model != alias {
			t.Fatalf("answer %+v", msg)
		}
	}
	if n := next.n.Load(); n != 1 {
		t.Fatalf("token endpoint called %d times for two requests, want 1", n)
	}
	reqs := p.Requests()
	want := "/v1/projects/sim-project/locations/us-east5/publishers/anthropic/models/" + vertexID + ":rawPredict"
	if got := reqs[len(reqs)-1].Header.Get("X-Sim-Cloud-Path"); got != want {
		t.Fatalf("Vertex path %q", got)
	}
}

func TestVertexStreamIsByteFaithful(t *testing.T) {
	p, srv := startSim(t)
	rt, _ := vertexTransport(t, p, srv.URL)
	_, got, err := rawStream(t, rt, "one two three")
	if err != nil {
		t.Fatal(err)
	}
	want := strings.ReplaceAll(directStream(t, srv.URL, "one two three"), bedrockID, alias)
	if got != want {
		t.Fatalf("stream differs:\n got %q\nwant %q", got, want)
	}
}

func TestVertexQuotaIsARateLimit(t *testing.T) {
	p, srv := startSim(t)
	rt, _ := vertexTransport(t, p, srv.URL)
	if err := p.AddFault(provider.Fault{Status: 429, Count: 1}); err != nil {
		t.Fatal(err)
	}
	_, err := sdk(rt).Messages.New(context.Background(), params("hi"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 429 || !strings.Contains(apiErr.RawJSON(), "rate_limit_error") ||
		!strings.Contains(apiErr.RawJSON(), "RESOURCE_EXHAUSTED") {
		t.Fatalf("want 429 rate_limit_error, got %v", err)
	}
}

func TestVertexRefusesATokenItDidNotIssue(t *testing.T) {
	_, srv := startSim(t)
	rt := &cloud.Vertex{Endpoint: srv.URL, Project: "p", Region: "us-east5", Next: http.DefaultTransport,
		Tokens: staticToken("ya29.made-up")}
	_, err := sdk(rt).Messages.New(context.Background(), params("hi"))
	var apiErr *anthropic.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 401 || !strings.Contains(apiErr.RawJSON(), "authentication_error") {
		t.Fatalf("want 401 authentication_error, got %v", err)
	}
}

func TestVertexCountTokens(t *testing.T) {
	p, srv := startSim(t)
	rt, _ := vertexTransport(t, p, srv.URL)
	n, err := sdk(rt).Messages.CountTokens(context.Background(), anthropic.MessageCountTokensParams{
		Model: alias, Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("three words here"))}})
	if err != nil {
		t.Fatal(err)
	}
	if n.InputTokens != 3 {
		t.Fatalf("input_tokens %d", n.InputTokens)
	}
}

type staticToken string

func (s staticToken) Token() (*oauth2.Token, error) {
	return &oauth2.Token{AccessToken: string(s), TokenType: "Bearer"}, nil
}
