package cloud

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	"golang.org/x/oauth2"
)

func chunk(t *testing.T, enc *eventstream.Encoder, w io.Writer, data string) {
	t.Helper()
	var m eventstream.Message
	m.Headers.Set(":message-type", eventstream.StringValue("event"))
	m.Headers.Set(":event-type", eventstream.StringValue("chunk"))
	m.Payload, _ = json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString([]byte(data))})
	if err := enc.Encode(w, m); err != nil {
		t.Fatal(err)
	}
}

// Each chunk's bytes become the data of one event, unchanged (spacing and
// key order included), named by its type; an exception ends the stream
// with Anthropic's error event of the matching type.
func TestEventStreamIsByteFaithful(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	chunk(t, enc, &buf, `{"type":"message_start","message":{"id":"m","usage":{"input_tokens":3}}}`)
	chunk(t, enc, &buf, `{"type": "ping"}`)
	var exc eventstream.Message
	exc.Headers.Set(":message-type", eventstream.StringValue("exception"))
	exc.Headers.Set(":exception-type", eventstream.StringValue("throttlingException"))
	exc.Payload = []byte(`{"message":"slow down"}`)
	if err := enc.Encode(&buf, exc); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(&eventStream{src: io.NopCloser(&buf), dec: eventstream.NewDecoder()})
	if err != nil {
		t.Fatal(err)
	}
	want := "event: message_start\ndata: {\"type\":\"message_start\",\"message\":{\"id\":\"m\",\"usage\":{\"input_tokens\":3}}}\n\n" +
		"event: ping\ndata: {\"type\": \"ping\"}\n\n" +
		"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\",\"message\":\"Bedrock throttlingException: slow down\"}}\n\n"
	if string(got) != want {
		t.Fatalf("got\n%q\nwant\n%q", got, want)
	}
}

// A stream cut inside a message is a read error, never a clean end.
func TestEventStreamCutIsAnError(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	chunk(t, enc, &buf, `{"type":"message_start"}`)
	chunk(t, enc, &buf, `{"type":"content_block_delta"}`)
	cut := buf.Bytes()[:buf.Len()-7]
	got, err := io.ReadAll(&eventStream{src: io.NopCloser(bytes.NewReader(cut)), dec: eventstream.NewDecoder()})
	if err == nil {
		t.Fatalf("a cut stream read to its end: %q", got)
	}
	if string(got) != "event: message_start\ndata: {\"type\":\"message_start\"}\n\n" {
		t.Fatalf("before the cut: %q", got)
	}
}

func anthropicRequest(t *testing.T, path, body string, beta string) *http.Request {
	t.Helper()
	r, _ := http.NewRequest(http.MethodPost, "http://up.invalid"+path, strings.NewReader(body))
	if beta != "" {
		r.Header.Set("Anthropic-Beta", beta)
	}
	return r
}

// The platform body has no model or stream, the model map's id for the
// client's model, and the request's betas in the body.
func TestParseCall(t *testing.T) {
	t.Parallel()
	r := anthropicRequest(t, "/v1/messages", `{"model":"claude-sonnet-4-5","stream":true,"max_tokens":5,"messages":[]}`, "a-1, b-2")
	c, err := parseCall(r, map[string]string{"claude-sonnet-4-5": "anthropic.x-v1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if c.model != "anthropic.x-v1:0" || !c.stream || c.count {
		t.Fatalf("call %+v", c)
	}
	var body map[string]any
	if err := json.Unmarshal(c.encode(BedrockVersion, nil), &body); err != nil {
		t.Fatal(err)
	}
	if _, ok := body["model"]; ok {
		t.Fatal("model left in the body")
	}
	if _, ok := body["stream"]; ok {
		t.Fatal("stream left in the body")
	}
	if body["anthropic_version"] != BedrockVersion || len(body["anthropic_beta"].([]any)) != 2 || body["max_tokens"] != 5.0 {
		t.Fatalf("body %v", body)
	}
	// Without a model the platforms cannot be asked: a request error.
	_, err = parseCall(anthropicRequest(t, "/v1/messages", `{"max_tokens":5}`, ""), nil)
	var re *requestError
	if !errors.As(err, &re) {
		t.Fatalf("no model: %v", err)
	}
}

// Bedrock's exceptions become Anthropic's errors with the status whose
// retry and cooldown rules fit them.
func TestBedrockErrorMapping(t *testing.T) {
	t.Parallel()
	for exc, want := range map[string]struct {
		status int
		typ    string
	}{
		"ThrottlingException":         {429, "rate_limit_error"},
		"ServiceUnavailableException": {529, "overloaded_error"},
		"ValidationException":         {400, "invalid_request_error"},
		"AccessDeniedException":       {403, "permission_error"},
		"":                            {418, "api_error"},
	} {
		resp := &http.Response{StatusCode: 418, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(`{"message":"m"}`))}
		if exc != "" {
			resp.StatusCode = 400
			resp.Header.Set("X-Amzn-Errortype", exc+":http://internal.amazon.com/coral/com.amazon.bedrock/")
		}
		got := bedrockError(anthropicRequest(t, "/v1/messages", "{}", ""), resp)
		b, _ := io.ReadAll(got.Body)
		var e struct {
			Type  string
			Error struct{ Type, Message string }
		}
		if json.Unmarshal(b, &e) != nil || got.StatusCode != want.status || e.Type != "error" || e.Error.Type != want.typ {
			t.Errorf("%s: %d %s", exc, got.StatusCode, b)
		}
	}
}

// /v1/models lists the model map's aliases; an alias not in it is 404.
func TestModelsFromTheMap(t *testing.T) {
	t.Parallel()
	m := map[string]string{"claude-sonnet-4-5": "a", "claude-haiku-4-5": "b"}
	r, _ := http.NewRequest(http.MethodGet, "http://up.invalid/v1/models", nil)
	b, _ := io.ReadAll(models(r, m).Body)
	var list struct {
		Data []struct{ ID string }
	}
	if json.Unmarshal(b, &list) != nil || len(list.Data) != 2 || list.Data[0].ID != "claude-haiku-4-5" {
		t.Fatalf("list %s", b)
	}
	r, _ = http.NewRequest(http.MethodGet, "http://up.invalid/v1/models/claude-opus-4-1", nil)
	if resp := models(r, m); resp.StatusCode != 404 {
		t.Fatalf("unknown alias: %d", resp.StatusCode)
	}
}

type blockedTokens struct{ release chan struct{} }

func (b blockedTokens) Token() (*oauth2.Token, error) {
	<-b.release
	return &oauth2.Token{AccessToken: "late"}, nil
}

// A request whose deadline passes while its token is being fetched ends
// with its context's error, not after the fetch.
func TestVertexTokenWaitEndsWithTheRequest(t *testing.T) {
	t.Parallel()
	b := blockedTokens{release: make(chan struct{})}
	defer close(b.release)
	v := &Vertex{Endpoint: "http://vertex.invalid", Project: "p", Region: "r", Tokens: b, Next: http.DefaultTransport}
	ctx, cancel := context.WithCancel(context.Background())
	r := anthropicRequest(t, "/v1/messages", `{"model":"m","max_tokens":1,"messages":[]}`, "").WithContext(ctx)
	cancel()
	if _, err := v.RoundTrip(r); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v", err)
	}
}
