package relay

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// bufferLimit bounds how much of a non-streaming response is read before
// anything is sent to the client, so a response the upstream cuts short can
// still be answered with a 502 instead of a truncated body. Messages
// answers are far smaller; a larger response is streamed past this point.
const bufferLimit = 8 << 20

// relayResponse sends the upstream response to the client. An event stream
// is relayed chunk by chunk, each flushed at once, so server-sent events
// reach the client one by one; when the upstream cuts it or goes silent past
// the idle deadline, the client gets Anthropic's mid-stream error event and
// the connection is closed, so SDKs raise instead of taking a cut answer for
// a finished one. Other responses are read whole first (up to bufferLimit).
func (h *Handler) relayResponse(w http.ResponseWriter, r *http.Request, resp *http.Response, a *attempt, up *snapshot.Upstream, ev *store.RequestEvent, start time.Time, x *Exchange, standing *limits.Status) {
	defer resp.Body.Close()
	if class, ok := statusErrorClass(resp.StatusCode); ok {
		h.metrics.upstreamError(up, class)
	}
	isSSE := strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream")
	var buf []byte
	var sb streamBuf
	if isSSE {
		buf = sb.first()
		defer sb.release()
	} else {
		bp := bufPool.Get().(*[]byte)
		buf = *bp
		defer bufPool.Put(bp)
	}

	var capture []byte
	var rerr error
	if !isSSE {
		capture, rerr = readUpTo(resp.Body, buf, a, bufferLimit)
		if rerr != nil && !errors.Is(rerr, io.EOF) && shuttingDown(r) {
			h.reply(w, r, errShutdown(), ev)
			return
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			h.interrupted(ev, a, up)
			h.reply(w, r, proxyerr.API(http.StatusBadGateway, "the upstream response was cut short").WithCode("response_truncated"), ev)
			return
		}
	}
	copyResponseHeaders(w.Header(), resp.Header, up.CredentialKind == credential.OAuth || standing != nil)
	if standing != nil {
		setLimitHeaders(w.Header(), standing)
	}
	if isSSE {
		w.Header().Del("Content-Length")
	}
	// A complete body matches the upstream's Content-Length, copied above
	// (the transport reports a short body as an error, not io.EOF).
	// A stream's headers are not flushed on their own: they go out with
	// the first event, in one write, as a stock reverse proxy sends them
	// (the provider sends message_start with its headers; a separate write
	// costs the client a second wake-up before its first event).
	w.WriteHeader(resp.StatusCode)
	flusher, _ := w.(http.Flusher)

	var tap sseTap
	clientGone := false
	if !isSSE {
		h.firstByte(ev, start)
		if _, werr := w.Write(capture); werr != nil {
			clientGone = true
		}
	}
	for rerr == nil && !clientGone {
		var n int
		n, rerr = resp.Body.Read(buf)
		if n > 0 {
			a.progress()
			chunk := buf[:n]
			if isSSE {
				started := tap.started
				tap.feed(chunk)
				if x != nil && !started && tap.started {
					x.Anchor = h.Clock.Now()
				}
				if ev.FirstByteMillis == 0 {
					h.firstByte(ev, start)
				}
			}
			if _, werr := w.Write(chunk); werr != nil {
				clientGone = true
				break
			}
			if isSSE && flusher != nil {
				flusher.Flush()
			}
		}
		if isSSE {
			buf = sb.next(n, len(buf))
		}
	}
	if !isSSE && !clientGone && flusher != nil {
		// The whole answer out before the bookkeeping below, which the
		// client need not wait for (net/http would send it only when the
		// handler returns).
		flusher.Flush()
	}
	abort := false
	if rerr != nil && !errors.Is(rerr, io.EOF) && !clientGone && shuttingDown(r) {
		// Cut by the proxy's own shutdown, not by the upstream: the client
		// is told as for any other cut; the event says why.
		h.cutStream(w, errShutdown(), ev, isSSE)
		abort = true
	} else if rerr != nil && !errors.Is(rerr, io.EOF) && !clientGone {
		h.interrupted(ev, a, up)
		ev.ErrorType = "stream_interrupted"
		if r.Context().Err() == nil {
			msg := "the upstream stream was cut"
			if errors.Is(a.cause(), errUpstreamIdle) {
				msg = "the upstream stream went silent past the idle deadline"
			}
			h.cutStream(w, proxyerr.API(http.StatusBadGateway, msg).WithCode("stream_interrupted"), ev, isSSE)
			abort = true
		}
	}
	if tap.errData != nil {
		// The upstream ended the stream with its own error event, passed
		// on unchanged: the answer failed, whatever its 200 said.
		ev.ErrorType = errorType(tap.errData)
		h.metrics.upstreamError(up, errorEventClass(ev.ErrorType))
	}
	if resp.StatusCode >= 400 {
		ev.ErrorType = errorType(capture)
	}
	h.finishWith(r.Context(), *ev, start, capture, tap.lines)
	if x != nil {
		x.Status, x.Body, x.SSE = resp.StatusCode, capture, tap.lines
		h.obs.Observe(*x)
	}
	if abort {
		// Close the connection without the final chunk: a client that
		// ignores the error event still sees a truncated transfer.
		panic(http.ErrAbortHandler)
	}
}

// readUpTo reads body until EOF, an error or limit bytes, re-arming the
// attempt's idle deadline on every read. It returns io.EOF when the body is
// complete and nil when the limit was reached first.
func readUpTo(body io.Reader, buf []byte, a *attempt, limit int) ([]byte, error) {
	var out []byte
	for len(out) < limit {
		n, err := body.Read(buf)
		if n > 0 {
			a.progress()
			out = append(out, buf[:n]...)
		}
		if err != nil {
			return out, err
		}
	}
	return out, nil
}

// firstByte records the time to first byte on the event and the metric,
// as the first bytes of the upstream's answer go to the client.
func (h *Handler) firstByte(ev *store.RequestEvent, start time.Time) {
	d := h.Clock.Since(start)
	ev.FirstByteMillis = max(1, ceilMillis(d)) // 0 means none
	h.metrics.firstByte(d)
}

// interrupted logs and counts a response the upstream cut or let go idle.
func (h *Handler) interrupted(ev *store.RequestEvent, a *attempt, up *snapshot.Upstream) {
	idle := errors.Is(a.cause(), errUpstreamIdle)
	a.traceCut(idle)
	if h.metrics != nil {
		if idle {
			h.metrics.idleTimeouts.Inc()
			h.metrics.upstreamError(up, ErrTimeout)
		} else {
			h.metrics.upstreamError(up, ErrProtocol)
		}
		h.metrics.interrupted.Inc()
	}
	h.Logger.Warn("upstream response interrupted", "principal_id", ev.PrincipalID, "upstream_id", up.ID, "idle_deadline", idle)
}
