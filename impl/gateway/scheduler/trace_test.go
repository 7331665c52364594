package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

// A job run is a span named for its type with its attempt and outcome; a
// failure's text on the span is redacted as in the logs, and the handler's
// error still reaches Work unchanged (ErrPermanent is told by it).
func TestJobRunsAreTraced(t *testing.T) {
	t.Parallel()
	c := otlptest.NewCollector()
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, SamplerRatio: 1},
		tracing.Options{ServiceName: "proxy", Exporter: otlptest.Exporter(c), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	s := &Scheduler{tracer: p.Tracer()}
	ok := &Type{Name: "test:ok", Handler: func(context.Context, Job) (Outcome, error) { return OutcomeNoop, nil }}
	bad := &Type{Name: "test:fail", Handler: func(context.Context, Job) (Outcome, error) {
		return "", fmt.Errorf("upstream said 401 to Authorization: Bearer sk-ant-oat01-TOPSECRETTOKEN: %w", ErrPermanent)
	}}
	if out, err := s.handle(context.Background(), ok, Job{Type: ok.Name, Attempt: 1}); out != OutcomeNoop || err != nil {
		t.Fatalf("ok job: %q %v", out, err)
	}
	if _, err := s.handle(context.Background(), bad, Job{Type: bad.Name, Attempt: 2}); !errors.Is(err, ErrPermanent) {
		t.Fatalf("failed job's error %v lost ErrPermanent", err)
	}
	spans := c.WaitFor(t, func(s []otlptest.Span) bool { return len(s) == 2 })
	if got, want := otlptest.Tree(spans, "pillar.job.kind", "pillar.job.attempt", "pillar.outcome"),
		"job test:ok (internal) pillar.job.kind=test:ok pillar.job.attempt=1 pillar.outcome=noop\n"+
			"job test:fail (internal) error pillar.job.kind=test:fail pillar.job.attempt=2 pillar.outcome=error\n"; got != want {
		t.Fatalf("spans:\n%s\nwant:\n%s", got, want)
	}
	if msg := spans[1].StatusMessage; strings.Contains(msg, "TOPSECRET") || msg == "" {
		t.Fatalf("status message %q: want the redacted error", msg)
	}
}

// Without a tracer the handler runs as it is.
func TestJobRunUntracedWithoutTracer(t *testing.T) {
	t.Parallel()
	s := &Scheduler{}
	calls := 0
	typ := &Type{Name: "test:ok", Handler: func(ctx context.Context, _ Job) (Outcome, error) { calls++; return OutcomeDone, nil }}
	if out, err := s.handle(context.Background(), typ, Job{Type: typ.Name}); out != OutcomeDone || err != nil || calls != 1 {
		t.Fatalf("%q %v calls %d", out, err, calls)
	}
}
