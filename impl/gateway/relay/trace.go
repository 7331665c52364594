package relay

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/gateway/usage"
)

// Tracing of the proxy path (docs/tracing.md): a server span per request,
// a client span per attempt under it. Every hook is called only when
// h.tracer is set, so tracing off costs a nil check; an unsampled span is
// not recording, and the hooks then build no attributes.

// traceRequest starts the request's span, continuing the client's trace
// context, and returns the request carrying it.
func (h *Handler) traceRequest(r *http.Request, ep endpoint) (*http.Request, trace.Span) {
	ctx := tracing.Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
	ctx, span := h.tracer.Start(ctx, r.Method+" "+r.URL.Path, trace.WithSpanKind(trace.SpanKindServer))
	if span.IsRecording() {
		span.SetAttributes(tracing.HTTPMethod.String(r.Method), tracing.HTTPRoute.String(r.URL.Path), operation(ep))
	}
	return r.WithContext(ctx), span
}

func operation(ep endpoint) attribute.KeyValue {
	if ep == epCountTokens {
		return tracing.GenAIOperation.String("count_tokens")
	}
	return tracing.GenAIOperation.String("chat")
}

// traceFinish puts the request's outcome on its span: status, error,
// time to first byte, and, read from the captured answer as the usage
// recorder will, tokens and cost.
func (h *Handler) traceFinish(ctx context.Context, ev *store.RequestEvent, body []byte, sse [][]byte) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	attrs := make([]attribute.KeyValue, 0, 12)
	attrs = append(attrs, tracing.HTTPStatus.Int(ev.Status), tracing.PrincipalID.String(ev.PrincipalID))
	if ev.Model != "" {
		attrs = append(attrs, tracing.GenAIModel.String(ev.Model))
	}
	if ev.UpstreamID != "" {
		attrs = append(attrs, tracing.UpstreamID.String(ev.UpstreamID))
	}
	if ev.FirstByteMillis > 0 {
		attrs = append(attrs, tracing.FirstByteMillis.Int64(ev.FirstByteMillis))
	}
	if ev.ErrorType != "" {
		attrs = append(attrs, tracing.ErrorType.String(ev.ErrorType))
	}
	if body != nil || sse != nil {
		p := usage.Pending{Event: *ev, Body: body, SSE: sse}
		usage.Extract(&p) // reads the captures; the recorder still gets them
		u := &p.Event
		attrs = append(attrs, tracing.GenAIInputTokens.Int64(u.InputTokens), tracing.GenAIOutput.Int64(u.OutputTokens),
			tracing.CacheReadTokens.Int64(u.CacheReadInputTokens), tracing.CacheCreationTokens.Int64(u.CacheCreationInputTokens))
		if h.traceCost != nil {
			if cost, ok := h.traceCost(u); ok {
				attrs = append(attrs, tracing.CostUSD.Float64(cost.Dollars()))
			}
		}
	}
	span.SetAttributes(attrs...)
	// A refusal (4xx) is the client's error, not the proxy's; a 5xx, or
	// a 2xx the upstream cut, is the request's failure.
	if ev.Status >= 500 || (ev.Status < 400 && ev.ErrorType != "") {
		span.SetStatus(codes.Error, ev.ErrorType)
	}
}

// traceLimit names the limit that refused the request (usd: a budget).
func traceLimit(r *http.Request, lr *limits.Refusal) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		span.SetAttributes(tracing.LimitKind.String(lr.Limit.Kind.String()))
	}
}

// traceSkip records a candidate passed over without a request.
func traceSkip(r *http.Request, up *snapshot.Upstream, reason string) {
	if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
		span.AddEvent(tracing.EventUpstreamSkipped, trace.WithAttributes(tracing.UpstreamID.String(up.ID),
			tracing.UpstreamName.String(up.Name), tracing.SkipReason.String(reason)))
	}
}

// traceAttempt starts the attempt's span under the request's; n is the
// attempt's place in the request's plan, from 1.
func (h *Handler) traceAttempt(a *attempt, ep endpoint, up *snapshot.Upstream, n int) {
	if !trace.SpanFromContext(a.ctx).IsRecording() {
		// An unsampled request's attempts would record nothing either:
		// the upstream is given the request span's context instead.
		return
	}
	_, a.span = h.tracer.Start(a.ctx, operationName(ep), trace.WithSpanKind(trace.SpanKindClient))
	if a.span.IsRecording() {
		host := up.BaseURL
		if t := up.MessagesTarget; t != nil {
			host = t.Host
		}
		a.span.SetAttributes(operation(ep), tracing.GenAISystem.String("anthropic"), tracing.UpstreamID.String(up.ID),
			tracing.UpstreamName.String(up.Name), tracing.UpstreamKind.String(up.Kind), tracing.ServerAddress.String(host),
			tracing.Attempt.Int(n))
	}
}

func operationName(ep endpoint) string {
	if ep == epCountTokens {
		return "count_tokens"
	}
	return "chat"
}

// traceOutbound gives the upstream the attempt's trace context, or
// strips the client's when propagation is off.
func (h *Handler) traceOutbound(out http.Header, a *attempt) {
	out.Del("Traceparent")
	out.Del("Tracestate")
	if h.propagate {
		ctx := a.ctx // the request span's, when the attempt has none
		if a.span != nil {
			ctx = trace.ContextWithSpan(ctx, a.span)
		}
		tracing.Propagator.Inject(ctx, propagation.HeaderCarrier(out))
	}
}

// Attempt outcomes; each is a no-op on an attempt without a span.

func (a *attempt) traceStatus(code int) {
	if a.span != nil && a.span.IsRecording() {
		a.span.SetAttributes(tracing.HTTPStatus.Int(code))
		if code >= 400 {
			a.span.SetAttributes(tracing.ErrorType.String(strconv.Itoa(code)))
		}
	}
}

// traceFailover: the request moves on to the next candidate because of
// this attempt.
func (a *attempt) traceFailover(reason string) {
	if a.span != nil && a.span.IsRecording() {
		a.span.SetAttributes(tracing.FailoverReason.String(reason))
		a.span.SetStatus(codes.Error, reason)
	}
}

func (a *attempt) traceCooldown(until time.Time) {
	if a.span != nil && a.span.IsRecording() {
		a.span.SetAttributes(tracing.CooldownUntil.String(until.UTC().Format(time.RFC3339)))
	}
}

func (a *attempt) traceCut(idle bool) {
	if a.span != nil && a.span.IsRecording() {
		reason := "upstream_cut"
		if idle {
			reason = "upstream_idle"
		}
		a.span.AddEvent(tracing.EventStreamCut, trace.WithAttributes(tracing.ErrorType.String(reason)))
		a.span.SetStatus(codes.Error, reason)
	}
}

// failoverReason names why an answer with this status moves the request on.
func failoverReason(code int) string { return "status_" + strconv.Itoa(code) }

// traceRefusal puts a refusal answered before any principal was known (a
// 401, an unknown route) on the request's span.
func traceRefusal(ctx context.Context, status int, code string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(tracing.HTTPStatus.Int(status), tracing.ErrorType.String(code))
	}
}
