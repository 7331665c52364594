package provider

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/protocol/eventstream"
	v4 "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
)

// The Bedrock endpoint answers Bedrock Runtime's InvokeModel and
// InvokeModelWithResponseStream for Anthropic models: the request is
// checked as Bedrock checks it (SigV4 by the AWS SDK's own signer, the
// body's anthropic_version, no model or stream field), then served by the
// same message generation and fault injection as /v1/messages, and the
// answer put into Bedrock's wire shapes.

// Default Bedrock credentials, accepted when Options.AWSKeys is empty.
const (
	DefaultAWSAccessKeyID     = "AKIASIMULATOR0000001"
	DefaultAWSSecretAccessKey = "sim-secret-access-key"
	// BedrockAnthropicVersion is the body field Bedrock requires.
	BedrockAnthropicVersion = "bedrock-2023-05-31"
	// bedrockService is SigV4's signing name for Bedrock Runtime.
	bedrockService = "bedrock"
	// signatureWindow is how far a request's X-Amz-Date may be from the
	// sim's clock, as AWS allows.
	signatureWindow = 5 * time.Minute
)

// bedrockException maps an Anthropic error status to Bedrock's exception
// name, as its REST error (x-amzn-ErrorType) and its stream exception.
var bedrockException = map[int]string{
	400: "ValidationException", 401: "AccessDeniedException", 403: "AccessDeniedException",
	404: "ResourceNotFoundException", 408: "ModelTimeoutException", 413: "ValidationException",
	429: "ThrottlingException", 500: "InternalServerException", 503: "ServiceUnavailableException",
	504: "ModelTimeoutException", 529: "ServiceUnavailableException",
}

// bedrockStatus is the status Bedrock answers an Anthropic status with:
// Bedrock has no 529, an overloaded model is 503.
func bedrockStatus(status int) int {
	if status == 529 {
		return http.StatusServiceUnavailable
	}
	return status
}

// streamException names the exception event Bedrock ends a stream with for
// an Anthropic mid-stream error type.
var streamException = map[string]string{
	"rate_limit_error": "throttlingException", "overloaded_error": "serviceUnavailableException",
	"api_error": "internalServerException", "invalid_request_error": "validationException",
}

func (p *Provider) awsSecret(keyID string) (string, bool) {
	if len(p.opts.AWSKeys) == 0 {
		return DefaultAWSSecretAccessKey, keyID == DefaultAWSAccessKeyID
	}
	s, ok := p.opts.AWSKeys[keyID]
	return s, ok
}

// bedrock serves POST /model/{modelId}/invoke and
// /model/{modelId}/invoke-with-response-stream.
func (p *Provider) bedrock(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, "/model/")
	i := strings.LastIndexByte(rest, '/')
	if i <= 0 {
		bedrockError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+r.URL.Path)
		return
	}
	model, op := rest[:i], rest[i+1:]
	if op != "invoke" && op != "invoke-with-response-stream" && op != "count-tokens" {
		bedrockError(w, http.StatusNotFound, "UnknownOperationException", "unknown operation "+op)
		return
	}
	if r.Method != http.MethodPost {
		bedrockError(w, http.StatusMethodNotAllowed, "UnknownOperationException", "use POST")
		return
	}
	body, tooLarge, err := readBody(r)
	if err != nil {
		return
	}
	if tooLarge {
		bedrockError(w, http.StatusRequestEntityTooLarge, "ValidationException", "request too large")
		return
	}
	if status, typ, msg := p.verifySigV4(r, body); status != 0 {
		bedrockError(w, status, typ, msg)
		return
	}
	if op == "count-tokens" {
		p.bedrockCount(w, r, model, body)
		return
	}
	inner, msg := cloudBody(body, model, op == "invoke-with-response-stream", false, BedrockAnthropicVersion)
	if msg != "" {
		bedrockError(w, http.StatusBadRequest, "ValidationException", msg)
		return
	}
	bw := &bedrockWriter{w: w, stream: op == "invoke-with-response-stream"}
	p.ServeHTTP(bw, p.innerRequest(r, "/v1/messages", inner))
	bw.finish()
}

// verifySigV4 checks the request's signature by signing the same request
// again with the AWS SDK's signer and the secret of its access key; a
// non-zero status is the refusal.
func (p *Provider) verifySigV4(r *http.Request, body []byte) (int, string, string) {
	const denied = "UnrecognizedClientException"
	auth := r.Header.Get("Authorization")
	rest, ok := strings.CutPrefix(auth, "AWS4-HMAC-SHA256 ")
	if !ok {
		return http.StatusForbidden, "MissingAuthenticationTokenException", "Missing Authentication Token"
	}
	fields := map[string]string{}
	for part := range strings.SplitSeq(rest, ",") {
		k, v, _ := strings.Cut(strings.TrimSpace(part), "=")
		fields[k] = v
	}
	scope := strings.Split(fields["Credential"], "/")
	if len(scope) != 5 || scope[3] != bedrockService || scope[4] != "aws4_request" {
		return http.StatusForbidden, "IncompleteSignatureException", "malformed credential scope"
	}
	secret, known := p.awsSecret(scope[0])
	if !known {
		return http.StatusForbidden, denied, "The security token included in the request is invalid."
	}
	at, err := time.Parse("20060102T150405Z", r.Header.Get("X-Amz-Date"))
	if err != nil {
		return http.StatusForbidden, "IncompleteSignatureException", "X-Amz-Date is missing or malformed"
	}
	if d := p.Now().Sub(at); d > signatureWindow || d < -signatureWindow {
		return http.StatusForbidden, "InvalidSignatureException", "Signature expired: " + r.Header.Get("X-Amz-Date") + " is not within 5 minutes of the server's time"
	}
	// The same request with only the headers the client signed.
	u := *r.URL
	again := &http.Request{Method: r.Method, URL: &u, Host: r.Host, Header: http.Header{}, ContentLength: int64(len(body))}
	for h := range strings.SplitSeq(fields["SignedHeaders"], ";") {
		if h != "host" && h != "content-length" {
			again.Header[http.CanonicalHeaderKey(h)] = r.Header.Values(h)
		}
	}
	sum := sha256.Sum256(body)
	creds := aws.Credentials{AccessKeyID: scope[0], SecretAccessKey: secret, SessionToken: r.Header.Get("X-Amz-Security-Token")}
	if err := v4.NewSigner().SignHTTP(context.Background(), creds, again, hex.EncodeToString(sum[:]), bedrockService, scope[2], at); err != nil {
		return http.StatusForbidden, "InvalidSignatureException", err.Error()
	}
	if subtle.ConstantTimeCompare([]byte(again.Header.Get("Authorization")), []byte(auth)) != 1 {
		return http.StatusForbidden, "InvalidSignatureException", "The request signature we calculated does not match the signature you provided."
	}
	return 0, "", ""
}

// cloudBody checks a cloud Messages body and builds the Anthropic body the
// sim serves; msg is the refusal. anthropic_version must be the cloud's;
// model is refused (it is in the path), and so is stream on Bedrock (the
// operation says it), while Vertex wants stream to agree with the method.
func cloudBody(body []byte, model string, stream, streamInBody bool, version string) ([]byte, string) {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, "Malformed input request: " + err.Error()
	}
	var v string
	if json.Unmarshal(m["anthropic_version"], &v) != nil || v != version {
		return nil, "Malformed input request: anthropic_version must be " + strconv.Quote(version)
	}
	extraneous := []string{"model"}
	if !streamInBody {
		extraneous = append(extraneous, "stream")
	} else {
		var s bool
		_ = json.Unmarshal(m["stream"], &s)
		if s != stream {
			return nil, "stream must be true exactly for streamRawPredict"
		}
	}
	for _, k := range extraneous {
		if _, ok := m[k]; ok {
			return nil, "Malformed input request: extraneous key [" + k + "] is not permitted"
		}
	}
	delete(m, "anthropic_version")
	m["model"], _ = json.Marshal(model)
	if stream {
		m["stream"] = json.RawMessage("true")
	}
	b, _ := json.Marshal(m)
	return b, ""
}

// bedrockCount serves CountTokens: the InvokeModel body, base64-encoded
// in input.invokeModel.body, counted as /v1/messages/count_tokens counts.
func (p *Provider) bedrockCount(w http.ResponseWriter, r *http.Request, model string, body []byte) {
	var in struct {
		Input struct {
			InvokeModel *struct {
				Body []byte `json:"body"`
			} `json:"invokeModel"`
		} `json:"input"`
	}
	if err := json.Unmarshal(body, &in); err != nil || in.Input.InvokeModel == nil {
		bedrockError(w, http.StatusBadRequest, "ValidationException", "input.invokeModel.body is required")
		return
	}
	inner, msg := cloudBody(in.Input.InvokeModel.Body, model, false, false, BedrockAnthropicVersion)
	if msg != "" {
		bedrockError(w, http.StatusBadRequest, "ValidationException", msg)
		return
	}
	rec := &bedrockWriter{w: &countWriter{ResponseWriter: w}}
	p.ServeHTTP(rec, p.innerRequest(r, "/v1/messages/count_tokens", inner))
	rec.finish()
}

// countWriter rewrites count_tokens' {"input_tokens":N} into CountTokens'
// {"inputTokens":N}.
type countWriter struct {
	http.ResponseWriter
	status int
	body   []byte
}

func (c *countWriter) WriteHeader(status int) { c.status = status }
func (c *countWriter) Write(b []byte) (int, error) {
	if c.status == 0 {
		c.status = http.StatusOK
	}
	if c.status >= 400 {
		c.ResponseWriter.WriteHeader(c.status)
		return c.ResponseWriter.Write(b)
	}
	var n struct {
		InputTokens int `json:"input_tokens"`
	}
	_ = json.Unmarshal(b, &n)
	out, _ := json.Marshal(map[string]int{"inputTokens": n.InputTokens})
	c.Header().Set("Content-Length", strconv.Itoa(len(out)))
	c.ResponseWriter.WriteHeader(c.status)
	return c.ResponseWriter.Write(out)
}

// innerRequest is the Anthropic request a cloud endpoint hands to the
// Messages handler: the sim's own key, the cloud's path kept in
// X-Sim-Cloud-Path for the request log, fault headers passed on.
func (p *Provider) innerRequest(r *http.Request, path string, body []byte) *http.Request {
	in := r.Clone(r.Context())
	in.URL = &url.URL{Path: path}
	in.RequestURI = path
	in.Header = http.Header{}
	in.Header.Set("Content-Type", "application/json")
	in.Header.Set("Anthropic-Version", "2023-06-01")
	key := DefaultAPIKey
	if len(p.opts.APIKeys) > 0 {
		key = p.opts.APIKeys[0]
	}
	in.Header.Set("X-Api-Key", key)
	in.Header.Set("X-Sim-Cloud-Path", r.URL.Path)
	if f := r.Header.Get("X-Sim-Fault"); f != "" {
		in.Header.Set("X-Sim-Fault", f)
	}
	in.Body = http.NoBody
	in.ContentLength = int64(len(body))
	in.Body = &bodyReader{bytes.NewReader(body)}
	return in
}

type bodyReader struct{ *bytes.Reader }

func (bodyReader) Close() error { return nil }

// bedrockError writes Bedrock's REST error: the exception in
// x-amzn-ErrorType and a JSON body with only a message.
func bedrockError(w http.ResponseWriter, status int, typ, msg string) {
	b, _ := json.Marshal(map[string]string{"message": msg})
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("X-Amzn-Errortype", typ+":http://internal.amazon.com/coral/com.amazon.bedrock/")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	w.Write(b)
}

// bedrockWriter turns the Messages handler's answer into Bedrock's: an
// error into Bedrock's error, a stream of server-sent events into an
// application/vnd.amazon.eventstream of chunk events (each the event's
// JSON, base64-encoded), an SSE error event into an exception event.
type bedrockWriter struct {
	w      http.ResponseWriter
	stream bool
	header http.Header
	status int
	// errBody holds an error answer until finish converts it.
	errBody []byte
	sse     bool
	pending []byte
	enc     *eventstream.Encoder
	frame   bytes.Buffer
}

func (b *bedrockWriter) Header() http.Header {
	if b.header == nil {
		b.header = http.Header{}
	}
	return b.header
}

// Unwrap lets dropConnection hijack the real connection.
func (b *bedrockWriter) Unwrap() http.ResponseWriter { return b.w }

func (b *bedrockWriter) WriteHeader(status int) {
	if b.status != 0 {
		return
	}
	b.status = status
	h := b.Header()
	if id := h.Get("Request-Id"); id != "" {
		b.w.Header().Set("X-Amzn-Requestid", id)
	}
	switch {
	case status >= 400:
		// Held for finish.
	case strings.HasPrefix(h.Get("Content-Type"), "text/event-stream"):
		b.sse, b.enc = true, eventstream.NewEncoder()
		b.w.Header().Set("Content-Type", "application/vnd.amazon.eventstream")
		b.w.Header().Set("X-Amzn-Bedrock-Content-Type", "application/json")
		b.w.WriteHeader(status)
	default:
		for k, v := range h {
			if k != "Request-Id" {
				b.w.Header()[k] = v
			}
		}
		b.w.WriteHeader(status)
	}
}

func (b *bedrockWriter) Write(p []byte) (int, error) {
	if b.status == 0 {
		b.WriteHeader(http.StatusOK)
	}
	switch {
	case b.status >= 400:
		b.errBody = append(b.errBody, p...)
		return len(p), nil
	case !b.sse:
		return b.w.Write(p)
	}
	b.pending = append(b.pending, p...)
	for {
		i := bytes.Index(b.pending, []byte("\n\n"))
		if i < 0 {
			return len(p), nil
		}
		if err := b.event(b.pending[:i]); err != nil {
			return 0, err
		}
		b.pending = b.pending[i+2:]
	}
}

// event writes one server-sent event as an event-stream message.
func (b *bedrockWriter) event(ev []byte) error {
	var name string
	var data []byte
	for line := range bytes.SplitSeq(ev, []byte("\n")) {
		if v, ok := bytes.CutPrefix(line, []byte("event: ")); ok {
			name = string(v)
		} else if v, ok := bytes.CutPrefix(line, []byte("data: ")); ok {
			data = v
		}
	}
	var msg eventstream.Message
	if name == "error" {
		var e errorBody
		_ = json.Unmarshal(data, &e)
		exc := streamException[e.Error.Type]
		if exc == "" {
			exc = "internalServerException"
		}
		msg.Headers.Set(":message-type", eventstream.StringValue("exception"))
		msg.Headers.Set(":exception-type", eventstream.StringValue(exc))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Payload, _ = json.Marshal(map[string]string{"message": e.Error.Message})
	} else {
		msg.Headers.Set(":event-type", eventstream.StringValue("chunk"))
		msg.Headers.Set(":content-type", eventstream.StringValue("application/json"))
		msg.Headers.Set(":message-type", eventstream.StringValue("event"))
		msg.Payload, _ = json.Marshal(map[string]string{"bytes": base64.StdEncoding.EncodeToString(data)})
	}
	b.frame.Reset()
	if err := b.enc.Encode(&b.frame, msg); err != nil {
		return err
	}
	if _, err := b.w.Write(b.frame.Bytes()); err != nil {
		return err
	}
	return http.NewResponseController(b.w).Flush()
}

func (b *bedrockWriter) Flush() {
	if b.status != 0 && b.status < 400 {
		_ = http.NewResponseController(b.w).Flush()
	}
}

// finish sends a held error in Bedrock's shape.
func (b *bedrockWriter) finish() {
	if b.status < 400 {
		return
	}
	var e errorBody
	_ = json.Unmarshal(b.errBody, &e)
	typ := bedrockException[b.status]
	if typ == "" {
		typ = "InternalServerException"
	}
	if ra := b.Header().Get("Retry-After"); ra != "" {
		b.w.Header().Set("Retry-After", ra)
	}
	bedrockError(b.w, bedrockStatus(b.status), typ, e.Error.Message)
}
