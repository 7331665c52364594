package oauth

import (
	"context"
	"errors"
	"net/http"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/testing/otlptest"
)

func tracedService(t *testing.T, s *Service) *otlptest.Collector {
	t.Helper()
	c := otlptest.NewCollector()
	p, err := tracing.New(context.Background(), tracing.Config{Enabled: true, SamplerRatio: 1},
		tracing.Options{ServiceName: "proxy", Exporter: otlptest.Exporter(c), Sync: true})
	if err != nil {
		t.Fatal(err)
	}
	s.Tracer = p.Tracer()
	return c
}

// A token refresh is a span naming the upstream and its outcome.
func TestRefreshIsTraced(t *testing.T) {
	w := newLazyWorld(t)
	c := tracedService(t, w.s)
	close(w.release)
	if err := w.s.RefreshToken(context.Background(), w.u.ID); err != nil {
		t.Fatal(err)
	}
	spans := c.WaitFor(t, func(s []otlptest.Span) bool { return len(s) == 1 })
	if got, want := otlptest.Tree(spans, "pillar.upstream.id", "pillar.outcome"),
		"oauth refresh (internal) pillar.upstream.id="+w.u.ID+" pillar.outcome=refreshed\n"; got != want {
		t.Fatalf("spans:\n%s\nwant:\n%s", got, want)
	}
}

// A refusal by the provider ends the span as refused, in error.
func TestRefusedRefreshIsTraced(t *testing.T) {
	w := newLazyWorld(t)
	c := tracedService(t, w.s)
	w.ts.before = func(rw http.ResponseWriter, r *http.Request) bool {
		rw.WriteHeader(400)
		rw.Write([]byte(`{"error":"invalid_grant"}`))
		return true
	}
	if err := w.s.RefreshToken(context.Background(), w.u.ID); !errors.Is(err, ErrRefreshRefused) {
		t.Fatalf("refusal: %v", err)
	}
	spans := c.WaitFor(t, func(s []otlptest.Span) bool { return len(s) == 1 })
	if got, want := otlptest.Tree(spans, "pillar.upstream.id", "pillar.outcome"),
		"oauth refresh (internal) error pillar.upstream.id="+w.u.ID+" pillar.outcome=refused\n"; got != want {
		t.Fatalf("spans:\n%s\nwant:\n%s", got, want)
	}
}
