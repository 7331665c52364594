package oauth

import (
	"errors"

	"go.opentelemetry.io/otel/trace"

	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
)

// endRefresh ends a refresh's span with its outcome: refreshed, moot (lost
// a race to another refresh), refused (the provider revoked the grant) or
// error; the error text is redacted as the logs' is.
func endRefresh(span trace.Span, moot bool, err error) {
	outcome := "refreshed"
	switch {
	case errors.Is(err, ErrRefreshRefused):
		outcome = "refused"
	case err != nil:
		outcome = "error"
	case moot:
		outcome = "moot"
	}
	var shown error
	if err != nil {
		shown = errors.New(scheduler.Redact(err.Error()))
	}
	tracing.End(span, outcome, shown)
}
