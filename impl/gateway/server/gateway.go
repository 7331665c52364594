package server

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/admission"
	"github.com/pillarhq/pillar/impl/gateway/affinity"
	"github.com/pillarhq/pillar/impl/gateway/alerts"
	"github.com/pillarhq/pillar/impl/gateway/capture"
	"github.com/pillarhq/pillar/impl/gateway/dashboard"
	"github.com/pillarhq/pillar/impl/gateway/egress"
	"github.com/pillarhq/pillar/impl/gateway/gauges"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/keepalive"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/money"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/pricing"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/routing"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/gateway/usage"
	"github.com/pillarhq/pillar/impl/gateway/webhook"
	"github.com/pillarhq/pillar/impl/service"
)

// gateway is the runtime start assembles on the opened storage: what the
// handlers, the scheduler and the background loops share.
type gateway struct {
	cfg *Config
	log *slog.Logger
	// clock is the one clock every service and loop reads.
	clock  clock.Clock
	getenv func(string) string
	stor   *storage
	box    *secret.Box

	reg   *prometheus.Registry
	plugs *plugins.Runtime
	rt    *snapshot.Runtime
	// lane keeps admin writes and their rebuilds off one processor on
	// SQLite (lane.go); nil on PostgreSQL.
	lane *lane
	lim  *limits.Limiter
	rec  *usage.Recorder
	// relayMetrics are the proxy path's series; the usage hand-off feeds
	// the ones labelled by principal, upstream and model.
	relayMetrics *relay.Metrics
	// board is the upstreams' live routing state (cooldowns, in flight);
	// share syncs its cooldowns with the other replicas.
	board *routing.Board
	share *routing.Sharer
	// sessions keeps sessions on their upstream; shareSessions syncs its
	// moves with the other replicas.
	sessions      *affinity.Table
	shareSessions *affinity.Sharer
	// admission enforces the principals' max_in_flight with a queue.
	admission *admission.Controller
	// upstreamCaps enforces the upstreams' max_in_flight with a queue.
	upstreamCaps *admission.Controller

	// Every outbound client to upstreams dials through the destination
	// policy, so no upstream reaches what the operator did not allow
	// (docs/operations.md, "Upstream destinations"); the listeners join it.
	dest         *egress.Policy
	subs         *subscriptions
	ka           *keepalive.Service
	prices       *pricing.Installer
	schedMetrics *scheduler.Metrics
	jobsHTTP     *http.Client

	sched      *scheduler.Scheduler
	closeSched func()
	// tracing is the OpenTelemetry pipeline; nil when tracing is off.
	tracing *tracing.Provider
	// alertMetrics are the alerts' series; alerts evaluates the
	// conditions once the scheduler that delivers them is bound.
	alertMetrics *alerts.Metrics
	alerts       *alerts.Evaluator
	// captures seals and writes the exchanges of principals with capture
	// on, off the request path.
	captures *capture.Sink
}

// buildRuntime loads the configuration snapshot and builds the proxy
// path's shared state (metrics, plugins, limits, usage) and the services
// around it. It starts nothing that outlives it; on an error the caller
// closes the storage.
func buildRuntime(ctx context.Context, cfg *Config, stor *storage, box *secret.Box, getenv func(string) string, log *slog.Logger) (*gateway, error) {
	g := &gateway{cfg: cfg, log: log, clock: clock.Or(cfg.clock), getenv: getenv, stor: stor, box: box, reg: prometheus.NewRegistry()}
	g.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	plugs, err := plugins.New(ctx, plugins.Options{Registerer: g.reg, Clock: g.clock, CallTimeout: cfg.Plugins.CallTimeout, MemoryLimitPages: cfg.Plugins.MemoryLimitPages})
	if err != nil {
		return nil, fmt.Errorf("plugin runtime: %w", err)
	}
	g.plugs = plugs
	st := stor.st
	g.rt = snapshot.NewRuntime(st, box, g.opts("snapshot"))
	g.rt.Stage = stagePlugins(st, plugs, log.With("component", "plugins"))
	if err := g.rt.Refresh(ctx); err != nil {
		_ = plugs.Close(ctx)
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	if cfg.db.Driver == SQLite {
		g.lane = newLane(adminLaneSize())
	}
	// Before anything that starts goroutines: its failure leaves only the
	// plugin runtime to close.
	if err := g.startTracing(ctx); err != nil {
		_ = plugs.Close(ctx)
		return nil, err
	}
	// default_limits: counted in memory, shared through the database.
	g.lim = limits.New(limits.Options{Store: st, Logger: log.With("component", "limits"), Clock: g.clock})
	// A replica starting (or restarting) enforces the cluster's counts
	// from its first request; a failure is logged and retried each second.
	_ = g.lim.Sync(ctx)
	// The state operators alert on, read at each scrape.
	g.reg.MustRegister(gauges.New(g.rt, st, g.lim, log.With("component", "gauges")))
	// The price installer comes before the recorder, which prices each
	// event with the catalog installed when it is recorded.
	g.prices = pricing.NewInstaller(st, g.opts("pricing"))
	meter := pricing.NewMeter(g.reg, g.prices.Current, g.principalName)
	g.relayMetrics = relay.NewMetrics(g.reg)
	g.admission = g.cfg.Relay.admission(g.clock, g.relayMetrics.ObserveQueueWait)
	g.reg.MustRegister(relay.NewQueueCollector(g.admission))
	g.upstreamCaps = g.cfg.Relay.upstreamCaps(g.clock)
	g.share = routing.NewSharer(st, g.opts("routing"))
	g.board = g.share.Board()
	// A replica starting learns the cooldowns running before its first request.
	_ = g.share.Sync(ctx)
	g.sessions = affinity.NewTable()
	g.shareSessions = affinity.NewSharer(g.sessions, st, g.opts("affinity"))
	// …and the sessions moved within the prompt cache's lifetime.
	_ = g.shareSessions.Sync(ctx)
	g.reg.MustRegister(relay.NewRoutingCollector(g.board, g.rt, g.clock))
	g.rec = usage.NewRecorder(st, usage.Options{Logger: log.With("component", "usage"), Clock: g.clock, Price: meter.Price, OnEvent: g.onEvent})
	g.captures = capture.NewSink(st, box, captureQueue, capture.NewMetrics(g.reg), log.With("component", "capture"))
	g.buildServices()
	return g, nil
}

// opts are a service's options: the gateway's one clock and its logger
// named for the component.
func (g *gateway) opts(component string) service.Options {
	return service.Options{Logger: g.log.With("component", component), Clock: g.clock}
}

// captureQueue bounds the captured exchanges waiting for the sink's
// worker; past it they are dropped and counted (docs/capture.md).
const captureQueue = 256

// onEvent feeds a recorded request's tokens and cost to its principal's
// limits and budgets, and to the usage metrics, on the recorder's goroutine
// (off the request path).
func (g *gateway) onEvent(ev store.RequestEvent) {
	snap := g.rt.Current()
	if p := snap.Principal(ev.PrincipalID); p != nil && len(p.Limits) > 0 {
		g.lim.AddTokens(p.ID, p.Limits, ev.InputTokens+ev.CacheCreationInputTokens+ev.OutputTokens)
		if ev.CostNanos != nil {
			g.lim.AddCost(p.ID, p.Limits, money.Nanos(*ev.CostNanos))
		}
	}
	g.relayMetrics.ObserveUsage(ev, snap, g.catalogKnows)
}

// catalogKnows reports whether the installed price catalog lists model.
func (g *gateway) catalogKnows(model string) bool {
	if g.prices == nil {
		return false
	}
	c := g.prices.Current()
	if c == nil {
		return false
	}
	_, ok := c.Models[model]
	return ok
}

// principalName labels spend metrics with names, bounded by the
// configured principals; a deleted principal keeps its id.
func (g *gateway) principalName(id string) string {
	if p := g.rt.Current().Principal(id); p != nil {
		return p.Name
	}
	return id
}

// buildServices wires the services beside the proxy path: subscriptions
// (OAuth, warm-up, quota), keep-alive and the price installer.
func (g *gateway) buildServices() {
	cfg, st := g.cfg, g.stor.st
	g.schedMetrics = scheduler.NewMetrics(g.reg)
	g.dest = &egress.Policy{AllowPrivate: cfg.AllowPrivateUpstreams}
	g.subs = newSubscriptions(cfg, st, g.box, g.rt, g.log, g.clock, g.getenv, g.dest.Client(30*time.Second))
	g.subs.warmer.Shape = shapeWarmup(st, g.plugs)
	g.ka = service.Init(g.opts("keepalive"), &keepalive.Service{Store: st, Box: g.box, Metrics: keepalive.NewMetrics(g.reg),
		Purged: g.schedMetrics.PromptCachePurgeRemoved, Upstream: func(id string) *snapshot.Upstream { return g.rt.Current().Upstream(id) },
		HTTP: g.dest.Client(time.Minute)})
	g.jobsHTTP = g.dest.Client(time.Minute)
	g.alertMetrics = alerts.NewMetrics(g.reg)
	// The lazy refresh a request asks for is bounded and counted.
	g.subs.Service.Metrics, g.subs.Service.LazyRefreshTimeout = g.schedMetrics, cfg.OAuth.LazyRefreshTimeout
	g.subs.Service.Tracer = g.tracing.Tracer()
}

// schedulerTypes are the durable job types of the gateway and its services.
func (g *gateway) schedulerTypes() []scheduler.Type {
	cfg := g.cfg
	types := jobs.Types(jobs.Deps{Options: g.opts("jobs"), Store: g.stor.st, Metrics: g.schedMetrics, Retention: cfg.Retention, CatalogURL: cfg.PriceCatalogURL, HTTP: g.jobsHTTP,
		Every: cfg.JobIntervals, Upstreams: func() []*snapshot.Upstream { return g.rt.Current().Upstreams }})
	types = append(types, g.subs.types(cfg)...)
	// Alert deliveries go where operators point, through the destination
	// policy like every other outbound call.
	send := service.Init(g.opts("webhook"), &webhook.Sender{Client: g.dest.Client(cfg.Alerts.DeliveryTimeout)})
	deliver := alerts.DeliveryType(alerts.Targets{Store: g.stor.st, Box: g.box}, send, cfg.Alerts.DeliveryTimeout, g.alertMetrics)
	// The entity class's curve (30 s doubling to 10 min) from RetryBase.
	deliver.Class.Base, deliver.Class.Max = cfg.Alerts.RetryBase, 20*cfg.Alerts.RetryBase
	types = append(types, deliver)
	return append(types, g.ka.Types(jobs.Interval(cfg.JobIntervals, keepalive.CleanupJob))...)
}

// startScheduler starts the durable scheduler on the storage's own
// connections. It does not fail: see below.
func (g *gateway) startScheduler(ctx context.Context) {
	cfg, types := g.cfg, g.schedulerTypes()
	o := scheduler.Options{Logger: g.log.With("component", "scheduler"), Clock: g.clock, Metrics: g.schedMetrics, Workers: cfg.SchedulerWorkers, ID: cfg.ReplicaID,
		RescueAfter: cfg.SchedulerRescueAfter, Tracer: g.tracing.Tracer()}
	sched, closeSched, err := g.stor.newScheduler(ctx, cfg.Database.SchedulerPool, types, o)
	if err == nil {
		g.bindScheduler(sched)
		if err = sched.Start(ctx); err != nil {
			closeSched()
		}
	}
	if err != nil {
		// A scheduler that cannot start (its migration, its pool) must not
		// take the proxy down: this replica serves without it,
		// svc_scheduler_init_failure 1, the scheduler endpoints answer 503
		// scheduler_unavailable; other replicas' schedulers run the jobs.
		g.log.Error("durable scheduler failed to start; serving proxy traffic without it (svc_scheduler_init_failure 1)", "error", err)
		sched, closeSched = scheduler.Down(types, scheduler.Options{Clock: g.clock, Metrics: g.schedMetrics}, err), func() {}
		g.bindScheduler(sched)
	}
	g.sched, g.closeSched = sched, closeSched
}

// bindScheduler gives the services the scheduler once it exists.
func (g *gateway) bindScheduler(s *scheduler.Scheduler) {
	g.subs.bind(s)
	g.ka.Jobs = s
	g.alerts = alerts.New(alerts.Options{Snapshots: g.rt, Store: g.stor.st, Budgets: g.lim, Queue: s, ReplicaID: g.cfg.ReplicaID,
		Logger: g.log.With("component", "alerts"), Clock: g.clock, Metrics: g.alertMetrics})
}

// handlers are what the listeners serve.
type handlers struct {
	relay, admin, metrics http.Handler
}

// handlers builds the proxy path and the admin API.
func (g *gateway) handlers(sec *secrets) handlers {
	cfg := g.cfg
	startedAt := g.clock.Now()
	outbound := relay.NewTransport()
	outbound.DialContext = g.dest.DialContext // security: the destination policy at connect time
	relayOpts := relay.Options{
		Transport: outbound, Source: g.rt, Recorder: g.rec, Observer: g.ka, Plugins: g.plugs, Limiter: g.lim, Metrics: g.relayMetrics, Logger: g.log.With("component", "relay"), Clock: g.clock,
		Board: g.board, Affinity: g.sessions, Admission: g.admission, UpstreamCaps: g.upstreamCaps,
		Capture: g.captures,
	}
	cfg.Relay.apply(&relayOpts, cfg.Listeners) // relay area: deadlines and body cap (docs/resilience.md)
	relayOpts.Tracer, relayOpts.Propagate, relayOpts.TraceCost = g.tracing.Tracer(), g.tracing.Propagate(), g.traceCost
	// A request meeting an expired or refused OAuth token asks the OAuth
	// service for a refresh and fails over meanwhile (docs/oauth.md).
	relayOpts.Refresher = g.subs.Service
	h := handlers{relay: relay.New(relayOpts), metrics: promhttp.HandlerFor(g.reg, promhttp.HandlerOpts{Registry: g.reg})}
	h.admin = admin.New(admin.Deps{
		Store: g.stor.st, Sealer: g.box, Opener: g.box, Runtime: g.adminRuntime(), Lane: g.writeLane(), Auth: sec.auth, Registerer: g.reg, SignIn: sec.signIn,
		Logger: g.log.With("component", "admin"), Clock: g.clock, Getenv: g.getenv,
		Version: Version, ReplicaID: cfg.ReplicaID, StartedAt: startedAt, PriceCatalog: installedCatalog{g.prices},
		Tracing: tracingStatus(cfg.Tracing),
		OAuth:   g.subs, Plugins: g.plugs, Dashboard: dashboard.Handler(), Routing: g.board, Sessions: g.sessions,
		UpstreamQueues: g.upstreamCaps, PrincipalQueues: g.admission,
		// What api_key_env may read and where upstreams may point, checked
		// when an operator writes them (docs/operations.md, "Security").
		Destinations: g.dest, KeyEnvAllow: cfg.UpstreamKeyEnvAllow, ReservedEnv: reservedEnv(cfg),
		HostCloudCredentials: cfg.AllowHostCloudCredentials,
		Extra:                g.adminExtra(h.metrics), Alerts: alertDeliveries{g.sched},
	})
	h.admin = traceAdmin(g.tracing, h.admin)
	return h
}

// writeLane is the lane admin writes and their refreshes take: none (a nil interface, not a
// nil *lane) on PostgreSQL, where a write mostly waits for the server and
// holding a lane meanwhile would only serialize the writes.
func (g *gateway) writeLane() admin.Lane {
	if g.lane == nil {
		return nil
	}
	return g.lane
}

// adminExtra are the handlers mounted beside the admin API, behind its
// authentication; the profiling endpoint only when configured.
func (g *gateway) adminExtra(metrics http.Handler) map[string]http.Handler {
	extra := map[string]http.Handler{
		"/metrics":          metrics,
		"/admin/scheduler/": schedulerHandler{g.sched},
	}
	if g.cfg.Debug.Pprof {
		extra[pprofPath] = pprofHandler()
	}
	return extra
}

// loops are the background loops that run until shutdown, in start order
// (running.close stops them in reverse). The limiter's is not one of them:
// it takes the recorder's last counts, so it stops after the recorder.
func (g *gateway) loops() *service.Group {
	cfg := g.cfg
	every := func(run func(context.Context, time.Duration), d time.Duration) service.Loop {
		return func(ctx context.Context) { run(ctx, d) }
	}
	l := &service.Group{Logger: g.log}
	// First, so stopped last: the exchanges of the last requests are
	// written once every other loop has returned.
	l.Add("capture", g.captures.Run)
	l.Add("reconcile", every(g.rt.Reconcile, cfg.ReconcileInterval))
	l.Add("routing-share", every(g.share.Run, routing.DefaultShareInterval))
	l.Add("affinity-share", every(g.shareSessions.Run, affinity.DefaultShareInterval))
	l.Add("keepalive", g.ka.Run)
	if g.alerts != nil {
		l.Add("alerts", every(g.alerts.Run, cfg.Alerts.EvaluateInterval))
	}
	// Local price catalog installation runs in-process on every replica.
	l.Add("pricing", every(g.prices.Run, cfg.ReconcileInterval))
	// Other replicas announce committed changes; the reconciler above
	// repairs any notification this session misses.
	if n := g.stor.changeListener(g.opts("notify"), g.applyChange); n != nil {
		l.Add("notify", n.Run)
	}
	return l
}

// startBackground starts the loops that run until shutdown and returns
// the running process that stops them.
func (g *gateway) startBackground() *running {
	loops := g.loops()
	loops.Start(context.Background())
	limCtx, limCancel := context.WithCancel(context.Background())
	limDone := make(chan struct{})
	go func() { g.lim.Run(limCtx); close(limDone) }()
	return &running{log: g.log, st: g.stor.st, rec: g.rec, plugs: g.plugs, tracing: g.tracing, loops: loops, life: &lifecycle{}, drain: g.cfg.DrainTimeout,
		stopLimits: func() { limCancel(); <-limDone }, errc: make(chan error, 2), sched: g.sched, closeSched: g.closeSched}
}

// applyChange refreshes the snapshot after another replica announced a
// change (payload: its generation). A generation past the snapshot's is
// rebuilt at once; without a readable one the stored generation decides.
func (g *gateway) applyChange(ctx context.Context, payload string) {
	var err error
	if gen, perr := strconv.ParseInt(payload, 10, 64); perr != nil {
		_, err = g.rt.RefreshIfChanged(ctx)
	} else {
		// Nothing is read for our own change, or one applied already.
		err = g.rt.RefreshPast(ctx, gen)
	}
	if err != nil {
		g.log.Warn("refresh after notification", "error", err)
	}
}

// runtimeInfo adapts the snapshot runtime to the admin API's view of it;
// its refreshes run inside gate when there is one (the lane).
type runtimeInfo struct {
	rt   *snapshot.Runtime
	gate snapshot.Gate
}

func (r runtimeInfo) Refresh(ctx context.Context) error { return r.rt.RefreshIn(ctx, r.gate) }

// adminRuntime is the runtime as the admin API sees it: the refreshes
// after its writes take the lane, as the writes do.
func (g *gateway) adminRuntime() runtimeInfo { return runtimeInfo{g.rt, g.writeLane()} }

func (r runtimeInfo) Info() admin.SnapshotInfo {
	s := r.rt.Current()
	u, p, k := s.Counts()
	return admin.SnapshotInfo{Generation: s.Generation, BuiltAt: s.BuiltAt, Upstreams: u, Principals: p, Keys: k}
}

// schedulerHandler serves /admin/scheduler/* behind the admin authentication.
type schedulerHandler struct{ s *scheduler.Scheduler }

func (h schedulerHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.s.Handler().ServeHTTP(w, r)
}

// installedCatalog adapts the price installer to the admin API.
type installedCatalog struct{ i *pricing.Installer }

func (c installedCatalog) Installed() (string, time.Time, json.RawMessage, bool) {
	cur := c.i.Current()
	if cur == nil {
		return "", time.Time{}, nil, false
	}
	return cur.Version, cur.InstalledAt, cur.Body, true
}
