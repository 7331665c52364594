package relay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/credential"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
)

// dispatch sends the request to the first candidate that answers. It falls
// over to the next candidate on connection failure, a rate-limit/overload
// answer, no response headers within headerTimeout, or an OAuth credential
// that is expired or refused (401) — always before anything was sent to the
// client, so the client's request does not fail while another upstream can
// serve it. An expired or refused OAuth token starts a lazy refresh. An
// upstream that is not Routable (its credential revoked) gets no request.
//
// An upstream at its max_in_flight is passed over like a cooling one, to
// the next candidate (spilled reports that one was, before the answering
// upstream). When no other candidate answered, the request waits in the
// first such upstream's queue and is sent there: the one the plan
// preferred among them, so a session keeps its upstream.
func (h *Handler) dispatch(r *http.Request, ep endpoint, cands []*snapshot.Upstream, body []byte, headerTimeout time.Duration, now time.Time) (_ *http.Response, _ *snapshot.Upstream, _ *attempt, spilled bool, _ error) {
	var lastErr error
	var lastUp *snapshot.Upstream
	capped := -1 // the first candidate passed over at its cap
	for i := 0; i < len(cands) || capped >= 0; i++ {
		var up *snapshot.Upstream
		var slot admission.Ticket
		waited := i >= len(cands)
		if waited {
			up, capped = cands[capped], -1
			var err error
			if slot, err = h.waitCap(r.Context(), up); err != nil {
				return nil, up, nil, false, err
			}
		} else {
			up = cands[i]
		}
		last := waited || i == len(cands)-1 && capped < 0
		if !up.Routable() {
			// Out of routing (its credential was revoked): never sent.
			// It explains the failure only when nothing else was tried.
			if lastErr == nil {
				lastErr, lastUp = errCredentialRevoked, up
			}
			if h.tracer != nil {
				traceSkip(r, up, "credential_revoked")
			}
			if !last {
				h.failover()
			}
			continue
		}
		if up.CredentialKind == credential.OAuth && expired(up, now) {
			h.refreshToken(up)
			if !last {
				if h.tracer != nil {
					traceSkip(r, up, "oauth_expired")
				}
				// The provider would refuse it: do not spend a round trip.
				h.failover()
				continue
			}
			// The last candidate is tried anyway: the provider decides.
		}
		if !waited && up.MaxInFlight > 0 {
			var free bool
			if slot, free = h.caps.TryAdmit(up.ID, up.MaxInFlight); !free {
				if capped < 0 {
					capped = i
				}
				h.countCap(capSpilled)
				continue
			}
		}
		a := h.newAttempt(r.Context(), headerTimeout)
		a.slot = slot
		if h.tracer != nil {
			h.traceAttempt(a, ep, up, i+1)
		}
		out, err := outbound(a.ctx, up, ep, r.URL.RawQuery, body, a, len(r.Header))
		if err != nil {
			a.done()
			lastErr, lastUp = err, up
			continue
		}
		copyRequestHeaders(out.Header, r.Header)
		if h.tracer != nil {
			h.traceOutbound(out.Header, a)
		}
		setCredential(out.Header, up)
		resp, err := h.roundTrip(up, out)
		if err != nil {
			if r.Context().Err() != nil {
				a.done()
				return nil, nil, nil, false, err
			}
			class := ErrConnect
			if errors.Is(a.cause(), errHeaderTimeout) {
				err, class = errHeaderTimeout, ErrTimeout
				if h.metrics != nil {
					h.metrics.headerTimeouts.Inc()
				}
			}
			h.metrics.upstreamError(up, class)
			a.traceFailover(errorClassNames[class])
			a.done()
			lastErr, lastUp = err, up
			h.failover()
			continue
		}
		a.headersIn()
		a.traceStatus(resp.StatusCode)
		if resp.StatusCode == http.StatusUnauthorized && up.CredentialKind == credential.OAuth {
			// An OAuth token the provider refuses (expired early, revoked
			// or rotated elsewhere): refresh it and move on.
			h.refreshToken(up)
			h.metrics.upstreamError(up, ErrAuth)
			// Drained only so the connection can be reused; the answer is
			// discarded either way.
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			a.traceFailover("oauth_refused")
			a.done()
			lastErr, lastUp = errOAuthRefused, up
			if !last {
				h.failover()
			}
			continue
		}
		if until, ok := routing.CooldownUntil(resp.StatusCode, resp.Header, h.Clock.Now()); ok && h.board.CoolDown(up.ID, until) {
			if h.metrics != nil {
				h.metrics.cooldowns.Inc()
			}
			a.traceCooldown(until)
		}
		if !last && retryableStatus(resp.StatusCode) {
			class, _ := statusErrorClass(resp.StatusCode)
			h.metrics.upstreamError(up, class)
			_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // drained for reuse, as above
			resp.Body.Close()
			a.traceFailover(failoverReason(resp.StatusCode))
			a.done()
			h.failover()
			continue
		}
		return resp, up, a, !waited && capped >= 0, nil
	}
	return nil, lastUp, nil, false, lastErr
}

// What an upstream's max_in_flight did to a request (Metrics.upstreamCap).
const (
	capSpilled = iota
	capQueued
	capRefused
)

func (h *Handler) countCap(what int) {
	if h.metrics != nil {
		h.metrics.upstreamCap[what].Inc()
	}
}

// waitCap waits in up's queue for a slot under its max_in_flight: every
// candidate that could take the request is at its cap.
func (h *Handler) waitCap(ctx context.Context, up *snapshot.Upstream) (admission.Ticket, error) {
	h.countCap(capQueued)
	slot, err := h.caps.Admit(ctx, up.ID, up.MaxInFlight)
	if err != nil && !errors.Is(err, admission.ErrCanceled) {
		h.countCap(capRefused)
	}
	return slot, err
}

var (
	errOAuthRefused = errors.New("upstream refused its OAuth token")
	// errCredentialRevoked: the candidate's provider refused its OAuth
	// refresh grant, so the credential is revoked until an operator runs
	// the OAuth flow again.
	errCredentialRevoked = errors.New("upstream credential revoked by its provider")
)

// outbound is the request to up carrying body, read through a.body, on
// the target parsed once per snapshot (an Upstream not built by the
// snapshot is parsed here) and copied into a.url; headers is how many the
// client sent, to size the request's header map once.
func outbound(ctx context.Context, up *snapshot.Upstream, ep endpoint, rawQuery string, body []byte, a *attempt, headers int) (*http.Request, error) {
	target, s := up.MessagesTarget, up.MessagesURL
	if ep == epCountTokens {
		target, s = up.CountTokensTarget, up.CountTokensURL
	}
	if target == nil {
		var err error
		if target, err = url.Parse(s); err != nil {
			return nil, err
		}
	}
	a.url = *target
	a.url.RawQuery = rawQuery
	a.body.Reset(body)
	// Built as NewRequestWithContext builds it, without parsing a URL
	// again: WithContext's copy is the request's one allocation.
	out := (&http.Request{
		Method: http.MethodPost, URL: &a.url, Host: target.Host,
		Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: make(http.Header, headers+2), // plus the credential's one or two
		Body:   &a.body, ContentLength: int64(len(body)),
		// GetBody lets the transport resend the body on a fresh
		// connection when a reused one turned out closed before anything
		// was sent.
		GetBody: func() (io.ReadCloser, error) { return &bodyReader{Reader: *bytes.NewReader(body)}, nil },
	}).WithContext(ctx)
	return out, nil
}

// bodyReader is a request body in memory.
type bodyReader struct{ bytes.Reader }

func (*bodyReader) Close() error { return nil }

func (h *Handler) failover() {
	if h.metrics != nil {
		h.metrics.failovers.Inc()
	}
}

// refreshToken asks the OAuth service for a lazy refresh of up's token and
// counts the refreshes it started.
func (h *Handler) refreshToken(up *snapshot.Upstream) {
	if h.refresh != nil && h.refresh.RequestRefresh(up.ID) && h.metrics != nil {
		h.metrics.lazyRefreshes.Inc()
	}
}

// retryableStatus: answers another upstream may not give, sent before
// anything reached the client (a rate limit, an overload, a server error
// or a gateway's) fail over.
func retryableStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, 529, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}
