package bench_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/usage"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

const (
	gatewayKey  = "sk-bench-gateway-key"
	upstreamKey = "sk-bench-upstream-key"
)

type staticSource struct{ s *snapshot.Snapshot }

func (s staticSource) Current() *snapshot.Snapshot { return s.s }

type plainOpener struct{}

func (plainOpener) Open(ct, _ []byte) ([]byte, error) { return ct, nil }

// discardEvents stands in for the database: the recorder still extracts
// usage and batches events, only the INSERT is skipped.
type discardEvents struct {
	mu       sync.Mutex
	n        int
	dialects map[string]int // events per dialect
}

func (d *discardEvents) InsertRequestEvents(_ context.Context, evs []store.RequestEvent) error {
	d.mu.Lock()
	d.n += len(evs)
	if d.dialects == nil {
		d.dialects = map[string]int{}
	}
	for _, e := range evs {
		d.dialects[e.Dialect]++
	}
	d.mu.Unlock()
	return nil
}

// gatewaySnapshot is the configuration make bench seeds through the admin
// API: one vendor_api_key upstream, one principal allowed every model with
// the built-in router, one key.
func gatewaySnapshot(upstreamURL string) *snapshot.Snapshot {
	builtin := store.BuiltinSubscriptionPreference
	h := sha256.Sum256([]byte(gatewayKey))
	cfg := &store.Config{
		Generation: 1,
		Upstreams: []store.Upstream{{
			ID: "up_sim", Name: "sim", Kind: store.KindVendorAPIKey, BaseURL: upstreamURL, Enabled: true,
			Credential: []byte(upstreamKey), CredentialKind: "api_key",
		}},
		Principals: []store.Principal{{ID: "pr_bench", Name: "bench", Kind: "machine", Enabled: true, AllowedModels: []string{"*"}}},
		Keys:       []store.Key{{ID: "key_bench", PrincipalID: "pr_bench", Hash: h[:]}},
		Chains:     []store.ChainEntry{{ID: "ce_bench", PrincipalID: "pr_bench", Slot: store.SlotRouter, Builtin: &builtin, Enabled: true}},
	}
	return snapshot.Build(cfg, plainOpener{}, time.Unix(0, 0))
}

// gateway is relay.Handler wired the way bin/proxy wires it (metrics, a
// usage recorder), minus the database.
type gateway struct {
	*relay.Handler
	rec    *usage.Recorder
	events *discardEvents
}

func newGateway(tb testing.TB, upstreamURL string, transport http.RoundTripper, opts ...func(*relay.Options)) gateway {
	ev := &discardEvents{}
	rec := usage.NewRecorder(ev, usage.Options{})
	tb.Cleanup(rec.Close)
	o := relay.Options{
		Source:    staticSource{gatewaySnapshot(upstreamURL)},
		Recorder:  rec,
		Transport: transport,
		Metrics:   relay.NewMetrics(prometheus.NewRegistry()),
		// The routing state, as bin/proxy wires it: every request reads the
		// cooldowns and counts itself in flight.
		Board: routing.NewBoard(nil),
	}
	for _, f := range opts {
		f(&o)
	}
	h := relay.New(o)
	return gateway{Handler: h, rec: rec, events: ev}
}

// recorded flushes the usage recorder and returns how many events it
// wrote, once want are written or after a few seconds. The relay answers
// the client before it hands the event over, so the last request's event
// may reach the recorder just after its answer.
func (g gateway) recorded(want int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	n := 0
	_ = waitfor.Poll(ctx, 10*time.Millisecond, func() error {
		g.rec.Flush(context.Background())
		g.events.mu.Lock()
		n = g.events.n
		g.events.mu.Unlock()
		if n < want {
			return fmt.Errorf("%d written", n)
		}
		return nil
	})
	return n
}
