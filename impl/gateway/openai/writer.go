package openai

import (
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
)

// AnthropicVersion is the API version the translation speaks, sent upstream
// for clients that name none (OpenAI clients never do).
const AnthropicVersion = "2023-06-01"

// anthropicVersion is the header value Prepare sets, one slice shared by
// every request instead of one allocated for each. Header values are
// replaced or appended to, never written in place (nothing in the gateway
// does), and its capacity of one makes an append copy it.
var anthropicVersion = []string{AnthropicVersion}[:1:1]

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
		h["Anthropic-Version"] = anthropicVersion
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

	status int
	// stream is st once the answer is known to be an event stream.
	stream *Stream
	st     Stream
	body   []byte
	// pending: chunks were written since the last flush. A flush with
	// none would send the headers alone: a write and a wake-up of the
	// client more before its first chunk.
	pending  bool
	finished bool
}

// chunkBufs holds the buffers a stream's chunks are built in, taken for
// one write at a time: a stream spends most of its life waiting for its
// next event and holds none while it does, and a new stream's first
// chunk is not built in a buffer grown from nothing.
var chunkBufs = sync.Pool{New: func() any { b := make([]byte, 0, 1<<10); return &b }}

// maxChunkBuf bounds the buffers kept for reuse: a burst of events makes
// a large one, which is dropped rather than pinned.
const maxChunkBuf = 64 << 10

// writeChunks builds the chunks add appends and writes them to the client.
func (x *Writer) writeChunks(add func(out []byte) []byte) error {
	bp := chunkBufs.Get().(*[]byte)
	out := add((*bp)[:0])
	var err error
	if len(out) > 0 {
		_, err = x.w.Write(out)
		x.pending = true
	}
	if cap(out) <= maxChunkBuf {
		*bp = out[:0]
		chunkBufs.Put(bp)
	}
	return err
}

// writers holds released Writers: one is made per Chat Completions
// request, and its stream's state makes it one of the request's largest
// allocations.
var writers = sync.Pool{New: func() any { return new(Writer) }}

// NewWriter returns the writer translating into w. A caller that knows
// when the answer is done with it (the handler returning) may Release it.
func NewWriter(w http.ResponseWriter, kind Kind, clk clock.Clock) *Writer {
	x := writers.Get().(*Writer)
	x.w, x.kind, x.clock = w, kind, clock.Or(clk)
	return x
}

// Release zeroes x and keeps it for another NewWriter. Nothing may use x
// afterwards: a handler releases it when it returns, after Finish, once
// net/http no longer lets anything write to the answer. Zeroing first
// means a use that slipped through finds no writer underneath, and the
// race detector sees the zeroing race with it.
func (x *Writer) Release() {
	*x = Writer{}
	writers.Put(x)
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

// Requested gives the model and the stream flag of the request
// translated, as they stand in the Messages body.
func (x *Writer) Requested() (model string, stream bool) { return x.info.Model, x.info.Stream }

func (x *Writer) Header() http.Header { return x.w.Header() }

func (x *Writer) WriteHeader(code int) {
	if x.status != 0 {
		return
	}
	x.status = code
	h := x.w.Header()
	if x.kind == Chat && code == http.StatusOK && strings.HasPrefix(h.Get("Content-Type"), "text/event-stream") {
		x.st.start(x.info, x.clock.Now().Unix())
		x.stream = &x.st
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
	if err := x.writeChunks(func(out []byte) []byte { return x.stream.Feed(out, p) }); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Flush passes a stream's chunks on, when there are any; a collected
// answer is complete when flushed, so it is translated and sent.
func (x *Writer) Flush() {
	if x.stream == nil {
		x.finish()
	} else if !x.pending {
		// The upstream's bytes completed no event yet.
		return
	}
	x.pending = false
	if f, ok := x.w.(http.Flusher); ok {
		f.Flush()
	}
}

// SetReadDeadline bounds reads of the request body on the client's
// connection, as the writer underneath does.
func (x *Writer) SetReadDeadline(t time.Time) error {
	if d, ok := x.w.(interface{ SetReadDeadline(time.Time) error }); ok {
		// net/http's writer, directly: a ResponseController would
		// be allocated for every request.
		return d.SetReadDeadline(t)
	}
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
		_ = x.writeChunks(x.stream.End) // a client that is gone cannot be told
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
