package scheduler

import (
	"context"
	"errors"

	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// handle runs t's handler for j inside a span (when tracing is on) named
// for the job type, ending with the job's outcome; the error on the span
// is redacted as the logs' is.
func (s *Scheduler) handle(ctx context.Context, t *Type, j Job) (Outcome, error) {
	if s.tracer == nil {
		return t.Handler(ctx, j)
	}
	ctx, span := tracing.Start(ctx, s.tracer, "job "+j.Type, tracing.JobKind.String(j.Type), tracing.JobAttempt.Int(j.Attempt))
	out, err := t.Handler(ctx, j)
	outcome, shown := string(out), error(nil)
	if err != nil {
		outcome, shown = "error", errors.New(Redact(err.Error()))
	}
	tracing.End(span, outcome, shown)
	return out, err // the original: Work tells ErrPermanent by it
}
