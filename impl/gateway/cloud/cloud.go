// Package cloud serves Claude through the cloud platforms that sell it:
// AWS Bedrock and Google Vertex AI. Each is an http.RoundTripper the relay
// sends its Anthropic Messages request through: it rewrites the request for
// the platform (the model in the path, the platform's anthropic_version in
// the body), authenticates it with the platform's own library (SigV4 from
// the AWS SDK, OAuth2 tokens from golang.org/x/oauth2/google), and turns
// the answer back into what the Anthropic API would have sent: the same
// JSON, the same server-sent events byte for byte, errors in Anthropic's
// shape with the status whose retry and cooldown rules fit them.
package cloud

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
)

// Paths of the Anthropic requests a transport accepts.
const (
	messagesPath    = "/v1/messages"
	countTokensPath = "/v1/messages/count_tokens"
	modelsPath      = "/v1/models"
)

// call is one Anthropic request as a cloud needs it: the upstream's id for
// the model, whether it streams, and the body without model and stream,
// with the platform's anthropic_version.
type call struct {
	// asked is the model the client named, model the upstream's id.
	asked  string
	model  string
	stream bool
	count  bool
	body   map[string]json.RawMessage
}

// parseCall reads the Anthropic request r. models maps a client's model to
// the upstream's id; a model it does not name is sent as asked.
func parseCall(r *http.Request, models map[string]string) (*call, error) {
	b, err := readAll(r)
	if err != nil {
		return nil, err
	}
	c := &call{count: r.URL.Path == countTokensPath}
	if !c.count && r.URL.Path != messagesPath {
		return nil, errors.New("cloud: no equivalent of " + r.URL.Path)
	}
	if err := json.Unmarshal(b, &c.body); err != nil || c.body == nil {
		return nil, badRequest("request body is not a JSON object")
	}
	if err := json.Unmarshal(c.body["model"], &c.model); err != nil || c.model == "" {
		return nil, badRequest("model: Field required")
	}
	c.asked = c.model
	if id, ok := models[c.model]; ok {
		c.model = id
	}
	if s, ok := c.body["stream"]; ok {
		_ = json.Unmarshal(s, &c.stream)
	}
	delete(c.body, "model")
	delete(c.body, "stream")
	// Betas travel in the body on the platforms, not in a header.
	if betas := r.Header.Values("Anthropic-Beta"); len(betas) > 0 {
		var list []string
		for _, v := range betas {
			for b := range strings.SplitSeq(v, ",") {
				if b = strings.TrimSpace(b); b != "" {
					list = append(list, b)
				}
			}
		}
		if len(list) > 0 {
			c.body["anthropic_beta"], _ = json.Marshal(list)
		}
	}
	return c, nil
}

// models answers GET /v1/models[/{id}] from the model map: the platforms
// list no models in the Anthropic API's terms, and the names a client may
// send this upstream are the map's (docs/cloud.md).
func models(req *http.Request, m map[string]string) *http.Response {
	type model struct {
		Type        string `json:"type"`
		ID          string `json:"id"`
		DisplayName string `json:"display_name"`
		CreatedAt   string `json:"created_at"`
	}
	const epoch = "1970-01-01T00:00:00Z"
	if id, one := strings.CutPrefix(req.URL.Path, modelsPath+"/"); one {
		if _, ok := m[id]; !ok {
			return anthropicError(req, proxyerr.New(http.StatusNotFound, proxyerr.TypeNotFound, "model "+strconv.Quote(id)+" is not in this upstream's model_map"), nil)
		}
		b, _ := json.Marshal(model{"model", id, id, epoch})
		return jsonResponse(req, http.StatusOK, b, nil)
	}
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	list := struct {
		Data    []model `json:"data"`
		HasMore bool    `json:"has_more"`
		FirstID *string `json:"first_id"`
		LastID  *string `json:"last_id"`
	}{Data: []model{}}
	for _, id := range ids {
		list.Data = append(list.Data, model{"model", id, id, epoch})
	}
	if len(ids) > 0 {
		list.FirstID, list.LastID = &ids[0], &ids[len(ids)-1]
	}
	b, _ := json.Marshal(list)
	return jsonResponse(req, http.StatusOK, b, nil)
}

// jsonResponse is a JSON answer to req made here, not by the platform.
func jsonResponse(req *http.Request, status int, b []byte, h http.Header) *http.Response {
	if h == nil {
		h = http.Header{}
	}
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(b)))
	return &http.Response{
		Status: strconv.Itoa(status) + " " + http.StatusText(status), StatusCode: status,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: h, Body: io.NopCloser(bytes.NewReader(b)), ContentLength: int64(len(b)), Request: req,
	}
}

// isModels reports whether req lists models.
// accept reads the relay's request for a cloud kind: the call to make, or
// (nil call) the answer the proxy gives itself — the models list, a 400
// for a request the platform cannot take — or the error reading it.
func accept(req *http.Request, m map[string]string) (*call, *http.Response, error) {
	if isModels(req) {
		return nil, models(req, m), nil
	}
	c, err := parseCall(req, m)
	var re *requestError
	if errors.As(err, &re) {
		return nil, anthropicError(req, proxyerr.InvalidRequest(re.msg), nil), nil
	}
	if err != nil {
		return nil, nil, err
	}
	return c, nil, nil
}

func isModels(req *http.Request) bool {
	return req.Method == http.MethodGet && (req.URL.Path == modelsPath || strings.HasPrefix(req.URL.Path, modelsPath+"/"))
}

// encode is the platform body: the call's with anthropic_version set.
func (c *call) encode(version string, extra map[string]json.RawMessage) []byte {
	c.body["anthropic_version"], _ = json.Marshal(version)
	for k, v := range extra {
		c.body[k] = v
	}
	b, _ := json.Marshal(c.body)
	return b
}

func readAll(r *http.Request) ([]byte, error) {
	if r.GetBody != nil {
		rc, err := r.GetBody()
		if err != nil {
			return nil, err
		}
		defer rc.Close()
		return io.ReadAll(rc)
	}
	if r.Body == nil {
		return nil, nil
	}
	defer r.Body.Close()
	return io.ReadAll(r.Body)
}

// requestError is a request the platform would refuse whatever it is
// sent with; answered as Anthropic answers an invalid request.
type requestError struct{ msg string }

func (e *requestError) Error() string { return e.msg }

func badRequest(msg string) error { return &requestError{msg: msg} }

// anthropicError is the response an Anthropic upstream would have given
// for e: its status and shape, and x-should-retry as the API sets it (a
// timeout, conflict, rate limit or server error is worth retrying).
func anthropicError(req *http.Request, e *proxyerr.Error, h http.Header) *http.Response {
	s := e.Status
	e.WithRetry(s == http.StatusRequestTimeout || s == http.StatusConflict || s == http.StatusTooManyRequests || s >= 500)
	if h == nil {
		h = http.Header{}
	}
	h.Set("X-Should-Retry", strconv.FormatBool(e.ShouldRetry()))
	r := jsonResponse(req, s, e.AppendJSON(nil), h)
	return r
}

// errorMap maps a platform's error names to the Anthropic error standing
// for them.
type errorMap map[string]mapped

// mapped is an Anthropic status and error type.
type mapped struct {
	status int
	typ    string
}

// of is name's status and type; for a name the map does not hold, the
// platform's status and the type the Anthropic API gives it.
func (m errorMap) of(name string, status int) mapped {
	e, ok := m[name]
	if !ok {
		e.status, e.typ = status, errorTypeOf(status)
	}
	return e
}

// outcome bounds the metrics' outcome label to the names m maps.
func (m errorMap) outcome(name string) string {
	if _, ok := m[name]; ok {
		return name
	}
	return outcomeOther
}

// errorTypeOf is Anthropic's error type for a status, as the API uses it.
func errorTypeOf(status int) string {
	switch status {
	case 400:
		return proxyerr.TypeInvalidRequest
	case 401:
		return proxyerr.TypeAuthentication
	case 403:
		return proxyerr.TypePermission
	case 404:
		return proxyerr.TypeNotFound
	case 413:
		return proxyerr.TypeRequestTooLarge
	case 429:
		return proxyerr.TypeRateLimit
	case proxyerr.StatusOverloaded:
		return proxyerr.TypeOverloaded
	}
	return proxyerr.TypeAPI
}

// replaceBody gives resp a new body of b, with its length.
func replaceBody(resp *http.Response, b []byte) {
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(b))
	resp.ContentLength = int64(len(b))
	resp.Header.Set("Content-Length", strconv.Itoa(len(b)))
}

// renameAnswer gives a create answer's body the client's model.
func renameAnswer(resp *http.Response, model string) (*http.Response, error) {
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		resp.Body.Close()
		return nil, err
	}
	replaceBody(resp, withModel(b, model))
	return resp, nil
}

// keepHeaders are the platform answer's headers passed on; the rest
// (the platform's request ids and tracing) say nothing to an Anthropic
// client.
func keepHeaders(src http.Header, ids ...string) http.Header {
	h := http.Header{}
	for _, k := range []string{"Content-Type", "Content-Length", "Retry-After"} {
		if v := src.Values(k); len(v) > 0 {
			h[k] = v
		}
	}
	for _, k := range ids {
		if v := src.Get(k); v != "" {
			h.Set("Request-Id", v)
			break
		}
	}
	return h
}
