package cloud

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"golang.org/x/oauth2"
)

// The benchmarks measure what a cloud transport adds to one request: the
// body rewrite, the signature or bearer, and for a Bedrock stream the
// event-stream decoding; the platform answers from memory.

const benchBody = `{"model":"claude-sonnet-4-5","max_tokens":64,"messages":[{"role":"user","content":"measure the added latency of the gateway please"}]}`

var benchEvents = []string{
	`{"type":"message_start","message":{"id":"msg_bench","type":"message","role":"assistant","model":"m","content":[],"stop_reason":null,"usage":{"input_tokens":8,"output_tokens":1}}}`,
	`{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}`,
	`{"type":"ping"}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"measure "}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"the "}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"added "}}`,
	`{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"latency "}}`,
	`{"type":"content_block_stop","index":0}`,
	`{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":8}}`,
	`{"type":"message_stop"}`,
}

type memPlatform struct{ message, stream []byte }

func (m memPlatform) RoundTrip(r *http.Request) (*http.Response, error) {
	_, _ = io.Copy(io.Discard, r.Body)
	b, ct := m.message, "application/json"
	if strings.HasSuffix(r.URL.Path, "-stream") {
		b, ct = m.stream, "application/vnd.amazon.eventstream"
	}
	return &http.Response{StatusCode: 200, Header: http.Header{"Content-Type": {ct}}, Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
}

func newMemPlatform(b *testing.B) memPlatform {
	var buf bytes.Buffer
	enc := eventstream.NewEncoder()
	for _, e := range benchEvents {
		var m eventstream.Message
		m.Headers.Set(":message-type", eventstream.StringValue("event"))
		m.Headers.Set(":event-type", eventstream.StringValue("chunk"))
		m.Payload, _ = json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString([]byte(e))})
		if err := enc.Encode(&buf, m); err != nil {
			b.Fatal(err)
		}
	}
	return memPlatform{message: []byte(`{"id":"msg_bench","type":"message","content":[{"type":"text","text":"ok"}],"usage":{"input_tokens":8,"output_tokens":1}}`), stream: buf.Bytes()}
}

func benchRequest(stream bool) *http.Request {
	body := benchBody
	if stream {
		body = strings.Replace(body, `"max_tokens"`, `"stream":true,"max_tokens"`, 1)
	}
	r, _ := http.NewRequest(http.MethodPost, "http://up.invalid/v1/messages", strings.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(strings.NewReader(body)), nil }
	return r
}

func benchTransport(b *testing.B, rt http.RoundTripper, stream bool) {
	b.ReportAllocs()
	for b.Loop() {
		resp, err := rt.RoundTrip(benchRequest(stream))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := io.Copy(io.Discard, resp.Body); err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
}

func bedrockBench(b *testing.B) *Bedrock {
	return &Bedrock{Endpoint: "https://bedrock-runtime.us-east-1.amazonaws.com", Region: "us-east-1",
		Credentials: aws.NewCredentialsCache(StaticAWSCredentials{AccessKeyID: "AKIDBENCH", SecretAccessKey: "secret"}.Provider()),
		Models:      map[string]string{"claude-sonnet-4-5": "anthropic.claude-sonnet-4-5-20250929-v1:0"}, Next: newMemPlatform(b),
		Signer: v4.NewSigner()}
}

// The floor: the same request and answer with no rewrite at all.
func BenchmarkPassthrough(b *testing.B) {
	p := newMemPlatform(b)
	b.Run("message", func(b *testing.B) { benchTransport(b, p, false) })
}

func BenchmarkBedrock(b *testing.B) {
	b.Run("message", func(b *testing.B) { benchTransport(b, bedrockBench(b), false) })
	b.Run("stream", func(b *testing.B) { benchTransport(b, bedrockBench(b), true) })
}

func BenchmarkVertex(b *testing.B) {
	tokens := oauth2.StaticTokenSource(&oauth2.Token{AccessToken: "ya29.bench", TokenType: "Bearer"})
	v := &Vertex{Endpoint: "https://us-east5-aiplatform.googleapis.com", Project: "p", Region: "us-east5", Tokens: tokens, Next: newMemPlatform(b)}
	b.Run("message", func(b *testing.B) { benchTransport(b, v, false) })
}
