package server

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/oauth"
	"github.com/pillarhq/pillar/impl/gateway/quota"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/warmup"
	"github.com/pillarhq/pillar/impl/service"
)

// subscriptions wires the services of vendor_oauth upstreams (OAuth flow
// and refresh, warm-up, usage poll and coupon claims) and serves them to
// the admin API.
type subscriptions struct {
	*oauth.Service
	quota  *quota.Service
	warmer *warmup.Warmer
	log    *slog.Logger
}

// httpc reaches the provider's OAuth, usage and warm-up endpoints (through
// the destination policy).
func newSubscriptions(cfg *Config, st store.Store, box *secret.Box, rt *snapshot.Runtime, log *slog.Logger, clk clock.Clock, getenv func(string) string, httpc *http.Client) *subscriptions {
	client := &oauth.Client{HTTP: httpc, ClientID: cfg.OAuth.ClientID}
	s := &subscriptions{log: log}
	s.Service = service.Init(service.Options{Logger: log.With("component", "oauth"), Clock: clk}, &oauth.Service{Store: st, Box: box, Client: client,
		RedirectURI: cfg.OAuth.RedirectURI, Scopes: cfg.OAuth.Scopes,
		Changed: func(ctx context.Context) {
			if err := rt.Refresh(ctx); err != nil {
				log.Warn("refresh after credential change", "error", err)
			}
		},
		Connected: s.connected,
		// The refresh job's retry curve: a shorter one only in tests.
		RefreshRetry: scheduler.RetryClass{Name: scheduler.Entity.Name, MaxAttempts: scheduler.Entity.MaxAttempts,
			Base: cfg.OAuth.RefreshRetryBase, Max: cfg.OAuth.RefreshRetryBase * 20},
	})
	s.warmer = service.Init(service.Options{Logger: log.With("component", "warmup"), Clock: clk}, &warmup.Warmer{Store: st, Tokens: s.Service, HTTP: httpc,
		Model: cfg.Warmup.Model, FreshFor: cfg.Warmup.FreshFor, Failpoint: failpoints(getenv("PROXY_FAILPOINTS"))})
	s.quota = service.Init(service.Options{Logger: log.With("component", "quota"), Clock: clk}, &quota.Service{Store: st, Tokens: s.Service, Client: client, StaleAfter: cfg.UsageStaleAfter})
	return s
}

func (s *subscriptions) types(cfg *Config) []scheduler.Type {
	every := func(name string) time.Duration { return jobs.Interval(cfg.JobIntervals, name) }
	var out []scheduler.Type
	out = append(out, s.Service.Types(every(oauth.WatchdogJob))...)
	out = append(out, s.warmer.Types(every(warmup.WatchdogType))...)
	out = append(out, s.quota.Types(every(quota.PollJob), every(quota.QuotaGCJob))...)
	return out
}

// bind gives the services the scheduler once it exists.
func (s *subscriptions) bind(sched *scheduler.Scheduler) {
	s.Service.Jobs, s.warmer.Jobs, s.quota.Jobs = sched, sched, sched
}

// connected runs after a flow completed or a token was refreshed: the new
// credential version gets a usage poll, and warm-up an immediate attempt
// when the upstream is eligible.
func (s *subscriptions) connected(ctx context.Context, u *store.Upstream) {
	if err := s.quota.EnqueuePoll(ctx, u.ID, "credential:"+strconv.FormatInt(u.CredentialVersion, 10)); err != nil {
		s.log.Warn("queue usage poll", "upstream_id", u.ID, "error", err)
	}
	if warmup.Eligible(u) {
		s.WarmupEnabled(ctx, u)
	}
}

// Observe, Claim and WarmupEnabled complete admin.OAuth.
func (s *subscriptions) Observe(ctx context.Context, u *store.Upstream) (*quota.View, error) {
	return s.quota.Observe(ctx, u)
}

func (s *subscriptions) Claim(ctx context.Context, upstreamID string) (*quota.View, error) {
	return s.quota.Claim(ctx, upstreamID)
}

func (s *subscriptions) WarmupEnabled(ctx context.Context, u *store.Upstream) {
	if err := s.warmer.Immediate(ctx, u.ID); err != nil {
		s.log.Warn("queue immediate warm-up", "upstream_id", u.ID, "error", err)
	}
}

// failpoints turns PROXY_FAILPOINTS (comma-separated names) into a hook
// that ends the process at those points. It exists for the crash tests of
// the conformance suites (docs/operations.md); unset, it does nothing.
func failpoints(spec string) func(string) {
	if spec == "" {
		return nil
	}
	names := map[string]bool{}
	for _, n := range strings.Split(spec, ",") {
		names[strings.TrimSpace(n)] = true
	}
	return func(name string) {
		if names[name] {
			os.Stderr.WriteString("failpoint " + name + ": exiting\n")
			os.Exit(77)
		}
	}
}
