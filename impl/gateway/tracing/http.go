package tracing

import (
	"context"
	"net/http"

	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Handler traces each request to next as a server span named for the
// service and method, renamed by Route once the handler knows its route;
// a nil tracer returns next itself.
func Handler(t trace.Tracer, service string, next http.Handler) http.Handler {
	if t == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := Propagator.Extract(r.Context(), propagation.HeaderCarrier(r.Header))
		ctx, span := t.Start(ctx, service+" "+r.Method, trace.WithSpanKind(trace.SpanKindServer),
			trace.WithAttributes(HTTPMethod.String(r.Method), URLPath.String(r.URL.Path)))
		defer span.End()
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r.WithContext(ctx))
		code := sw.code
		if code == 0 {
			code = http.StatusOK
		}
		span.SetAttributes(HTTPStatus.Int(code))
		if code >= 500 {
			span.SetStatus(codes.Error, http.StatusText(code))
		}
	})
}

// Route names the current server span for its route pattern ("GET
// /admin/v1/upstreams/{id}"), which groups requests where the path would not.
func Route(ctx context.Context, method, pattern string) {
	span := trace.SpanFromContext(ctx)
	if !span.IsRecording() {
		return
	}
	span.SetName(method + " " + pattern)
	span.SetAttributes(HTTPRoute.String(pattern))
}

// ErrorCode puts an API error's stable code on the current span.
func ErrorCode(ctx context.Context, code string) {
	if span := trace.SpanFromContext(ctx); span.IsRecording() {
		span.SetAttributes(ErrorType.String(code))
	}
}

// statusWriter remembers the status written; Unwrap keeps the writer's
// other abilities (flushing, deadlines) reachable by ResponseController.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.code == 0 {
		s.code = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.code == 0 {
		s.code = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }
