package relay

import (
	"bytes"
	"errors"
	"net/http"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/proxyerr"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// reply is how the proxy path answers with an error: it writes e (status,
// body, retry headers), counts it in the metrics and records the request
// event with e's status and code. ev is nil before the key was
// authenticated: such a refusal has no principal to record and is only
// counted. A client that went away is written to all the same: the write
// fails quietly, and a context cancelled by the proxy's shutdown or by a
// broken body says nothing of whether the client still listens.
func (h *Handler) reply(w http.ResponseWriter, r *http.Request, e *proxyerr.Error, ev *store.RequestEvent) {
	if ev == nil {
		if h.metrics != nil {
			h.metrics.observe(e.Status, 0)
		}
		if h.tracer != nil {
			traceRefusal(r.Context(), e.Status, e.EventCode())
		}
		e.Write(w, false)
		return
	}
	ev.Status, ev.ErrorType = e.Status, e.EventCode()
	h.finish(r.Context(), *ev, ev.At) // counts it in the metrics
	e.Write(w, false)
}

// cutStream ends an answer already under way with e: the client of an
// event stream gets it as the stream's error event; the request event,
// recorded later with what was relayed, keeps the upstream's status and
// takes e's code.
func (h *Handler) cutStream(w http.ResponseWriter, e *proxyerr.Error, ev *store.RequestEvent, isSSE bool) {
	ev.ErrorType = e.EventCode()
	if isSSE {
		e.Write(w, true)
	}
}

// The errors the proxy path answers with on its own behalf.

// shutdownMessage tells a client its request was cut by the proxy's
// shutdown: retried, it reaches another replica.
const shutdownMessage = "the proxy is shutting down; retry the request"

// errShutdown: the request was cut by the proxy's own shutdown, a
// retryable 503.
func errShutdown() *proxyerr.Error {
	return proxyerr.API(http.StatusServiceUnavailable, shutdownMessage).WithCode("proxy_shutdown")
}

// bodyError is the answer to a request body that could not be read.
func bodyError(err error) *proxyerr.Error {
	switch {
	case errors.Is(err, errTooLarge):
		return proxyerr.TooLarge("request body exceeds 32 MB")
	case errors.Is(err, errOverloaded):
		// Past the global cap on held bodies: Anthropic's own answer to
		// overload, which the SDKs retry with backoff.
		return proxyerr.Overloaded("the proxy holds too many request bodies at once; retry shortly")
	default:
		// Timed out or broken.
		return proxyerr.InvalidRequest("cannot read request body")
	}
}

// translateError is the answer to a Chat Completions body the translation
// refused (its own message) or could not hold.
func translateError(err error) *proxyerr.Error {
	if errors.Is(err, errOverloaded) {
		return proxyerr.Overloaded(err.Error())
	}
	return proxyerr.InvalidRequest(err.Error())
}

// unreachableError is the answer when no candidate answered; err is the
// last candidate's failure.
func unreachableError(err error) *proxyerr.Error {
	switch {
	case errors.Is(err, errHeaderTimeout):
		return proxyerr.API(http.StatusBadGateway, "upstream did not answer in time").WithCode("upstream_timeout")
	case errors.As(err, new(*admission.Refusal)):
		var ref *admission.Refusal
		errors.As(err, &ref)
		why := "the queue wait ran out"
		if ref.Full {
			why = "its queue is full"
		}
		return proxyerr.RateLimited("every upstream that may serve this request is at its max_in_flight and "+why, ref.RetryAfter)
	case errors.Is(err, errOAuthRefused):
		// The last candidate's OAuth token was refused: a refresh is
		// under way, so a retry shortly succeeds; the provider's 401
		// would tell the client its own key is wrong.
		return proxyerr.API(http.StatusServiceUnavailable, "the upstream refused its credential; it is being refreshed, retry shortly").
			WithCode("upstream_unauthorized")
	case errors.Is(err, errCredentialRevoked):
		// Retrying cannot help until an operator acts: the SDKs must not.
		return proxyerr.API(http.StatusServiceUnavailable,
			"no upstream can serve this request: its provider revoked the upstream's OAuth credential (refresh grant refused); an operator must run the OAuth flow again").
			WithCode("upstream_credential_revoked").WithRetry(false)
	default:
		return proxyerr.API(http.StatusBadGateway, "upstream unreachable")
	}
}

// errNoUpstream: the principal has no upstream that may be asked.
func errNoUpstream() *proxyerr.Error {
	return proxyerr.API(http.StatusServiceUnavailable, "no enabled upstream is available for this principal")
}

// errorType reads the Anthropic error type out of an error body, if any.
func errorType(body []byte) string {
	i := bytes.Index(body, []byte(`"error":{"type":"`))
	if i < 0 {
		i = bytes.Index(body, []byte(`"error": {"type": "`))
		if i < 0 {
			return "upstream_error"
		}
		i += len(`"error": {"type": "`)
	} else {
		i += len(`"error":{"type":"`)
	}
	j := bytes.IndexByte(body[i:], '"')
	if j < 0 || j > 64 {
		return "upstream_error"
	}
	// The type is stored with the request event: only a word of the
	// shape Anthropic's types have, never bytes an upstream chose freely.
	for _, c := range body[i : i+j] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_') {
			return "upstream_error"
		}
	}
	return string(body[i : i+j])
}
