package tracing

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
)

// Start starts an internal span under ctx's (a job run, an OAuth
// refresh); with a nil tracer it returns ctx and a span that records
// nothing. End it with End.
func Start(ctx context.Context, t trace.Tracer, name string, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t == nil {
		return ctx, trace.SpanFromContext(context.Background())
	}
	return t.Start(ctx, name, trace.WithAttributes(attrs...))
}

// End ends span with the outcome: err (its text already free of secrets)
// marks it failed.
func End(span trace.Span, outcome string, err error) {
	if span.IsRecording() {
		if outcome != "" {
			span.SetAttributes(Outcome.String(outcome))
		}
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
	}
	span.End()
}
