package cloud

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"

	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// BedrockVersion is the anthropic_version Bedrock requires in the body.
const BedrockVersion = "bedrock-2023-05-31"

// bedrockSigningName is SigV4's service name for Bedrock Runtime.
const bedrockSigningName = "bedrock"

// BedrockEndpoint is Bedrock Runtime's endpoint in region.
func BedrockEndpoint(region string) string {
	return "https://bedrock-runtime." + region + ".amazonaws.com"
}

// Bedrock sends Anthropic Messages requests to Bedrock Runtime's
// InvokeModel, InvokeModelWithResponseStream and CountTokens.
type Bedrock struct {
	// Endpoint is Bedrock Runtime's base URL (BedrockEndpoint(Region)
	// unless pointed elsewhere, e.g. at a VPC endpoint or the simulator).
	Endpoint string
	Region   string
	// Credentials signs every request; wrap it in aws.NewCredentialsCache
	// so temporary credentials are fetched once and renewed before expiry.
	Credentials aws.CredentialsProvider
	// Models maps a client's model to this upstream's model id or
	// inference profile.
	Models map[string]string
	// Next carries the signed request (the relay's transport, with its
	// egress checks).
	Next http.RoundTripper
	// Metrics counts the outcomes (nil: not counted).
	Metrics *Metrics
	// Signer signs the requests; share one across requests, as it caches
	// the day's derived signing key (nil: a new one each request).
	Signer *v4.Signer
}

var _ http.RoundTripper = (*Bedrock)(nil)

func (b *Bedrock) RoundTrip(req *http.Request) (*http.Response, error) {
	c, answer, err := accept(req, b.Models)
	if c == nil {
		return answer, err
	}
	op, accept := "invoke", "application/json"
	body := c.encode(BedrockVersion, nil)
	switch {
	case c.count:
		op = "count-tokens"
		body, _ = json.Marshal(map[string]any{"input": map[string]any{"invokeModel": map[string][]byte{"body": body}}})
	case c.stream:
		op, accept = "invoke-with-response-stream", "application/vnd.amazon.eventstream"
	}
	// The model id goes in one path segment; ids and inference profile
	// ARNs hold ':' and '/', escaped as the SDK escapes them.
	u, err := url.Parse(strings.TrimRight(b.Endpoint, "/") + "/model/" + url.PathEscape(c.model) + "/" + op)
	if err != nil {
		return nil, err
	}
	out, err := http.NewRequestWithContext(req.Context(), http.MethodPost, u.String(), bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	out.Header.Set("Content-Type", "application/json")
	out.Header.Set("Accept", accept)
	if err := b.sign(req.Context(), out, body); err != nil {
		b.Metrics.observe(store.KindBedrock, outcomeCredential)
		return nil, err
	}
	resp, err := b.Next.RoundTrip(out)
	if err != nil {
		return nil, err
	}
	resp.Request = req
	if resp.StatusCode >= 400 {
		exc, _, _ := strings.Cut(resp.Header.Get("X-Amzn-Errortype"), ":")
		b.Metrics.observe(store.KindBedrock, bedrockStatus.outcome(exc))
		return bedrockError(req, resp), nil
	}
	b.Metrics.observe(store.KindBedrock, outcomeOK)
	resp.Header = keepHeaders(resp.Header, "X-Amzn-Requestid")
	switch {
	case c.count:
		return countAnswer(resp)
	case c.stream:
		resp.Header.Set("Content-Type", "text/event-stream")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		resp.Body = &eventStream{src: resp.Body, dec: eventstream.NewDecoder(), metrics: b.Metrics, model: c.asked}
		return resp, nil
	}
	return renameAnswer(resp, c.asked)
}

// sign signs out with the current credentials through the AWS SDK.
func (b *Bedrock) sign(ctx context.Context, out *http.Request, body []byte) error {
	creds, err := b.Credentials.Retrieve(ctx)
	if err != nil {
		return fmt.Errorf("bedrock: no AWS credentials: %w", err)
	}
	sum := sha256.Sum256(body)
	signer := b.Signer
	if signer == nil {
		signer = v4.NewSigner()
	}
	// Signed at the wall clock, never the injected one: AWS refuses a
	// signature dated minutes away from its own clock.
	return signer.SignHTTP(ctx, creds, out, hex.EncodeToString(sum[:]), bedrockSigningName, b.Region, time.Now())
}

// countAnswer turns CountTokens' {"inputTokens":N} into count_tokens'.
func countAnswer(resp *http.Response) (*http.Response, error) {
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	var n struct {
		InputTokens *int `json:"inputTokens"`
	}
	if json.Unmarshal(raw, &n) != nil || n.InputTokens == nil {
		// Never a made-up count: a client would trust it.
		resp.Body.Close()
		return anthropicError(resp.Request, proxyerr.API(http.StatusBadGateway, "Bedrock's CountTokens answer has no inputTokens"), nil), nil
	}
	b, _ := json.Marshal(map[string]int{"input_tokens": *n.InputTokens})
	resp.Header.Set("Content-Type", "application/json")
	replaceBody(resp, b)
	return resp, nil
}

// bedrockStatus is the Anthropic status and error type standing for a
// Bedrock exception: throttling is a rate limit (429) and an unavailable
// or not-ready model an overload (529), so the relay's failover and
// cooldown treat them as the Anthropic API's.
var bedrockStatus = errorMap{
	"ThrottlingException":                 {429, "rate_limit_error"},
	"ServiceQuotaExceededException":       {429, "rate_limit_error"},
	"ServiceUnavailableException":         {529, "overloaded_error"},
	"ModelNotReadyException":              {529, "overloaded_error"},
	"ValidationException":                 {400, "invalid_request_error"},
	"AccessDeniedException":               {403, "permission_error"},
	"UnrecognizedClientException":         {401, "authentication_error"},
	"InvalidSignatureException":           {401, "authentication_error"},
	"ExpiredTokenException":               {401, "authentication_error"},
	"IncompleteSignatureException":        {401, "authentication_error"},
	"ResourceNotFoundException":           {404, "not_found_error"},
	"ModelTimeoutException":               {504, "api_error"},
	"ModelErrorException":                 {500, "api_error"},
	"InternalServerException":             {500, "api_error"},
	"MissingAuthenticationTokenException": {401, "authentication_error"},
}

// bedrockError answers a Bedrock error in Anthropic's shape, the
// exception named in x-amzn-ErrorType (its part before ':').
func bedrockError(req *http.Request, resp *http.Response) *http.Response {
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var e struct {
		Message string `json:"message"`
	}
	_ = json.Unmarshal(raw, &e)
	exc, _, _ := strings.Cut(resp.Header.Get("X-Amzn-Errortype"), ":")
	m := bedrockStatus.of(exc, resp.StatusCode)
	msg := e.Message
	if exc != "" {
		msg = "Bedrock " + exc + ": " + msg
	}
	return anthropicError(req, proxyerr.New(m.status, m.typ, msg), keepHeaders(resp.Header, "X-Amzn-Requestid"))
}

// streamErrorType is the Anthropic error type of a Bedrock stream
// exception (its :exception-type header).
var streamErrorType = map[string]string{
	"throttlingException":         proxyerr.TypeRateLimit,
	"serviceUnavailableException": proxyerr.TypeOverloaded,
	"modelStreamErrorException":   proxyerr.TypeAPI,
	"internalServerException":     proxyerr.TypeAPI,
	"modelTimeoutException":       proxyerr.TypeTimeout,
	"validationException":         proxyerr.TypeInvalidRequest,
}

// eventStream reads Bedrock's event stream and gives the server-sent
// events the Anthropic API would have sent: each chunk's bytes are an
// event's JSON, sent unchanged as the data of an event named by its type.
// An exception ends the stream with Anthropic's error event; a cut or
// corrupt stream is a read error, which the relay reports as a cut.
type eventStream struct {
	src io.ReadCloser
	// read counts the bytes taken from src, to tell the end of the stream
	// from a message cut short.
	read    int64
	dec     *eventstream.Decoder
	payload []byte
	pending []byte
	done    bool
	metrics *Metrics
	// model is the client's name for the model, given to message_start
	// ("": left as sent).
	model string
}

func (s *eventStream) Read(p []byte) (int, error) {
	for len(s.pending) == 0 {
		if s.done {
			return 0, io.EOF
		}
		if err := s.next(); err != nil {
			return 0, err
		}
	}
	n := copy(p, s.pending)
	s.pending = s.pending[n:]
	return n, nil
}

func (s *eventStream) Close() error { return s.src.Close() }

// counted is src counting what is read from it.
type counted struct{ s *eventStream }

func (c counted) Read(p []byte) (int, error) {
	n, err := c.s.src.Read(p)
	c.s.read += int64(n)
	return n, err
}

// next decodes one message into pending.
func (s *eventStream) next() error {
	before := s.read
	msg, err := s.dec.Decode(counted{s}, s.payload[:0])
	if errors.Is(err, io.EOF) && s.read == before {
		s.done = true
		return nil
	}
	if errors.Is(err, io.EOF) {
		// The decoder reads a short payload without complaint and meets
		// the end at the checksum: the message was cut.
		return io.ErrUnexpectedEOF
	}
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return io.ErrUnexpectedEOF
		}
		return err
	}
	s.payload = msg.Payload
	switch header(msg, ":message-type") {
	case "event":
		if header(msg, ":event-type") != "chunk" {
			return nil // other event types carry nothing Anthropic sends
		}
		var chunk struct {
			Bytes []byte `json:"bytes"`
		}
		if err := json.Unmarshal(msg.Payload, &chunk); err != nil {
			return errors.New("bedrock: malformed chunk: " + err.Error())
		}
		var ev struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(chunk.Bytes, &ev); err != nil || ev.Type == "" {
			return errors.New("bedrock: chunk without an event type")
		}
		data := chunk.Bytes
		if ev.Type == "message_start" && s.model != "" {
			data = withStartModel(data, s.model)
		}
		s.pending = appendEvent(s.pending[:0], ev.Type, data)
	case "exception", "error":
		exc := header(msg, ":exception-type")
		if exc == "" {
			exc = header(msg, ":error-code")
		}
		var e struct {
			Message string `json:"message"`
		}
		_ = json.Unmarshal(msg.Payload, &e)
		typ, ok := streamErrorType[exc]
		if !ok {
			typ = proxyerr.TypeAPI
			s.metrics.observe(store.KindBedrock, "stream_"+outcomeOther)
		} else {
			s.metrics.observe(store.KindBedrock, "stream_"+exc)
		}
		// The stream's error event, as the Anthropic API ends a failed stream.
		b := proxyerr.New(0, typ, "Bedrock "+exc+": "+e.Message).AppendJSON(nil)
		s.pending, s.done = appendEvent(s.pending[:0], "error", b), true
	}
	return nil
}

func header(m eventstream.Message, name string) string {
	if v := m.Headers.Get(name); v != nil {
		return v.String()
	}
	return ""
}

// appendEvent frames one server-sent event as the Anthropic API does.
func appendEvent(b []byte, name string, data []byte) []byte {
	b = append(b, "event: "...)
	b = append(b, name...)
	b = append(b, "\ndata: "...)
	b = append(b, data...)
	return append(b, "\n\n"...)
}

// StaticAWSCredentials are access keys kept sealed as an upstream's
// credential (JSON).
type StaticAWSCredentials struct {
	AccessKeyID     string `json:"access_key_id"`
	SecretAccessKey string `json:"secret_access_key"`
	SessionToken    string `json:"session_token,omitempty"`
}

// JSON is the keys as sealed.
func (s StaticAWSCredentials) JSON() []byte {
	b, _ := json.Marshal(s)
	return b
}

// Provider is an SDK credentials provider of the keys.
func (s StaticAWSCredentials) Provider() aws.CredentialsProvider {
	return aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: s.AccessKeyID, SecretAccessKey: s.SecretAccessKey, SessionToken: s.SessionToken, Source: "pillar"}, nil
	})
}
