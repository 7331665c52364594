package relay

import (
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// Capturer receives the exchanges of principals with capture on
// (capture.Sink). Submit must not block.
type Capturer interface{ Submit(capture.Exchange) }

// captured is one request's capture under way: made only for a principal
// with capture on, so other requests allocate nothing for it.
type captured struct {
	id        string // the request event's id, set on its event
	principal string
	req, resp *capture.Buffer
}

// startCapture begins capturing an admitted request of a principal with
// capture on: the body as the client sent it, and from here on every
// byte the client is sent (under the OpenAI translation, so a Chat
// Completions answer is captured as OpenAI's shape). It returns the
// writer the relay writes to.
func (h *Handler) startCapture(w http.ResponseWriter, q *admitted) http.ResponseWriter {
	c := &captured{id: store.NewID("ev"), principal: q.key.Principal.ID,
		req: capture.NewBuffer(h.captureLimit), resp: capture.NewBuffer(h.captureLimit)}
	_, _ = c.req.Write(q.received)
	q.capture = c
	tee := func(w http.ResponseWriter) http.ResponseWriter { return &teeWriter{ResponseWriter: w, to: c.resp} }
	if q.chat != nil {
		q.chat.Wrap(tee)
		return w
	}
	return tee(w)
}

// endCapture hands a finished request's capture to the sink, after its
// last byte was written (a cut stream's error event included).
func (h *Handler) endCapture(q *admitted) {
	c := q.capture
	h.capture.Submit(capture.Exchange{EventID: c.id, PrincipalID: c.principal, At: q.start,
		Request: c.req.Bytes(), Response: c.resp.Bytes(), Truncated: c.req.Truncated() || c.resp.Truncated()})
}

// teeWriter copies what the client is sent into a capture buffer, whose
// writes never fail: the client's answer is the same with or without it.
type teeWriter struct {
	http.ResponseWriter
	to *capture.Buffer
}

func (t *teeWriter) Write(p []byte) (int, error) {
	n, err := t.ResponseWriter.Write(p)
	_, _ = t.to.Write(p[:n])
	return n, err
}

// Flush passes the relay's per-event flushes on.
func (t *teeWriter) Flush() {
	if f, ok := t.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// SetReadDeadline keeps dontWaitForBody working through the tee.
func (t *teeWriter) SetReadDeadline(d time.Time) error {
	return http.NewResponseController(t.ResponseWriter).SetReadDeadline(d)
}

// Unwrap gives http.ResponseController the writer underneath.
func (t *teeWriter) Unwrap() http.ResponseWriter { return t.ResponseWriter }
