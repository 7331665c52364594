package openai

import (
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
)

// AnthropicVersion is the API version the translation speaks, sent upstream
// for clients that name none (OpenAI clients never do).
const AnthropicVersion = "2023-06-01"

// Dialect reports whether a request to an endpoint both APIs have (GET
// /v1/models) speaks OpenAI's dialect: Anthropic's API requires an
// anthropic-version header, which every Anthropic client sends and no
// OpenAI client does; an x-api-key header is Anthropic's too.
func Dialect(r *http.Request) bool {
	return r.Header.Get("Anthropic-Version") == "" && r.Header.Get("X-Api-Key") == ""
}

// Prepare readies an OpenAI client's request for the relay: the provider
// needs an anthropic-version, and OpenAI's account headers mean nothing to
// it. A model list asks for the longest page: OpenAI's list has no pages.
func Prepare(r *http.Request) {
	h := r.Header
	if h.Get("Anthropic-Version") == "" {
		h.Set("Anthropic-Version", AnthropicVersion)
	}
	for _, k := range []string{"Openai-Organization", "Openai-Project", "Openai-Beta"} {
		h.Del(k)
	}
	if r.URL.Path == "/v1/models" && r.URL.RawQuery == "" {
		r.URL.RawQuery = "limit=1000"
	}
}

// Kind is what a Writer translates.
type Kind int

const (
	// Chat answers POST /v1/chat/completions.
	Chat Kind = iota
	// Models answers GET /v1/models[/{id}].
	Models
)

// Writer is the http.ResponseWriter a Messages answer is written into on
// behalf of an OpenAI client: it writes the translation to the client's
// writer. An event stream is translated as it is written, each write
// passed on at once; a JSON answer (a completion, a model list, an error)
// is collected and translated when flushed or finished.
type Writer struct {
	w      http.ResponseWriter
	kind   Kind
	clock  clock.Clock // dates the completions (their created field)
	info   Info
	reqErr *Error

	status   int
	stream   *Stream
	body     []byte
	out      []byte
	finished bool
}

// NewWriter returns the writer translating into w.
func NewWriter(w http.ResponseWriter, kind Kind, clk clock.Clock) *Writer {
	return &Writer{w: w, kind: kind, clock: clock.Or(clk)}
}

// Translate translates the chat request body; the answer is translated for
// it. A refusal is kept, so the 400 written for it carries its parameter.
func (x *Writer) Translate(body []byte) ([]byte, error) {
	out, info, err := Translate(body)
	if err != nil {
		x.reqErr = err
		return nil, err
	}
	x.info = info
	return out, nil
}

func (x *Writer) Header() http.Header { return x.w.Header() }

func (x *Writer) WriteHeader(code int) {
	if x.status != 0 {
		return
	}
	x.status = code
	h := x.w.Header()
	if x.kind == Chat && code == http.StatusOK && strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		x.stream = NewStream(x.info, x.clock.Now().Unix())
		h.Del("Content-Length")
		x.w.WriteHeader(code)
	}
}

func (x *Writer) Write(p []byte) (int, error) {
	if x.status == 0 {
		x.WriteHeader(http.StatusOK)
	}
	if x.stream == nil {
		x.body = append(x.body, p...)
		return len(p), nil
	}
	x.out = x.stream.Feed(x.out[:0], p)
	if len(x.out) > 0 {
		if _, err := x.w.Write(x.out); err != nil {
			return 0, err
		}
	}
	return len(p), nil
}

// Flush passes a stream's chunks on; a collected answer is complete when
// flushed, so it is translated and sent.
func (x *Writer) Flush() {
	if x.stream == nil {
		x.finish()
	}
	if f, ok := x.w.(http.Flusher); ok {
		f.Flush()
	}
}

// SetReadDeadline bounds reads of the request body on the client's
// connection, as the writer underneath does.
func (x *Writer) SetReadDeadline(t time.Time) error {
	return http.NewResponseController(x.w).SetReadDeadline(t)
}

// Unwrap gives http.ResponseController the writer underneath.
func (x *Writer) Unwrap() http.ResponseWriter { return x.w }

// Finish completes the answer once the relay is done with it: a stream
// that ended without its end gets the error chunk the SDKs raise on, a
// collected answer is translated and sent.
func (x *Writer) Finish() {
	if x.stream != nil {
		if x.finished {
			return
		}
		x.finished = true
		x.out = x.stream.End(x.out[:0])
		if len(x.out) > 0 {
			_, _ = x.w.Write(x.out) // a client that is gone cannot be told
		}
		return
	}
	x.finish()
}

// Failed reports whether the answer was an error or a stream that failed.
func (x *Writer) Failed() bool {
	return x.status >= 400 || (x.stream != nil && x.stream.Failed)
}

func (x *Writer) finish() {
	if x.finished || x.status == 0 {
		return
	}
	x.finished = true
	status, body := x.status, x.body
	switch {
	case status >= 400:
		e := x.reqErr
		if e == nil || status != http.StatusBadRequest {
			e = ErrorFrom(status, body)
		}
		body = e.body()
	case status == http.StatusOK:
		var err error
		if x.kind == Chat {
			body, err = Completion(body, x.info, x.clock.Now().Unix())
		} else {
			body, err = ModelList(body)
		}
		if err != nil {
			status = http.StatusBadGateway
			body = FromProxy(proxyerr.API(status, "the upstream answer could not be translated")).body()
		}
	}
	h := x.w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(body)))
	x.w.WriteHeader(status)
	_, _ = x.w.Write(body)
}
