// Package server wires the proxy binary: configuration, storage, the
// snapshot runtime, the proxy and admin listeners, and their shutdown.
package server

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/pillarhq/pillar/impl/gateway/admin"
	"github.com/pillarhq/pillar/impl/gateway/dashboard"
	"github.com/pillarhq/pillar/impl/gateway/egress"
	"github.com/pillarhq/pillar/impl/gateway/jobs"
	"github.com/pillarhq/pillar/impl/gateway/keepalive"
	"github.com/pillarhq/pillar/impl/gateway/limits"
	"github.com/pillarhq/pillar/impl/gateway/notify"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/pricing"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/postgres"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
	"github.com/pillarhq/pillar/impl/gateway/usage"
)

// Version is stamped at build time with -ldflags.
var Version = "dev"

// Main runs the proxy until ctx ends. env is the process environment lookup.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "storage" {
		return storageCommand(ctx, args[1:], getenv, stderr)
	}
	cfg, err := ParseConfig(args, getenv, stderr)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	log := newLogger(cfg, stderr)
	s, err := start(ctx, cfg, getenv, log, stderr)
	if err != nil {
		return err
	}
	select {
	case <-ctx.Done():
		return s.shutdown()
	case err := <-s.errc:
		s.shutdown()
		return fmt.Errorf("listener stopped: %w", err)
	}
}

func newLogger(cfg *Config, w io.Writer) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(cfg.LogLevel))
	o := &slog.HandlerOptions{Level: lvl}
	if cfg.LogFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, o))
	}
	return slog.New(slog.NewTextHandler(w, o))
}

type running struct {
	log *slog.Logger
	st  store.Store
	rec *usage.Recorder
	// proxySrv drains first (its listener closes at once); adminSrv keeps
	// answering /readyz (503) and /metrics until the drain ends.
	proxySrv, adminSrv *http.Server
	life               *lifecycle
	drain              time.Duration
	cancel             context.CancelFunc
	errc               chan error
	sched              *scheduler.Scheduler
	closeSched         func()
	// stopLimits hands the last limit counts to the database (after the
	// recorder counted the last tokens, before the store closes).
	stopLimits func()
}

func start(ctx context.Context, cfg *Config, getenv func(string) string, log *slog.Logger, stderr io.Writer) (*running, error) {
	driver, dsn, _ := ParseDatabaseURL(cfg.DatabaseURL)

	key, keyNote, err := masterKey(driver, dsn, getenv)
	if err != nil {
		return nil, err
	}
	box, err := secret.New(key)
	if err != nil {
		return nil, err
	}
	auth, tokenNote, err := adminAuth(cfg, driver, dsn, getenv)
	if err != nil {
		return nil, err
	}
	metricsToken, err := scrapeToken(getenv)
	if err != nil {
		return nil, err
	}

	if driver == "postgres" {
		if err := checkServerBudget(ctx, cfg, dsn); err != nil {
			return nil, err
		}
	}
	st, err := openStore(ctx, cfg, driver, dsn, log)
	if err != nil {
		return nil, fmt.Errorf("open %s database: %w", driver, err)
	}

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	plugs, err := plugins.New(ctx, plugins.Options{Registerer: reg, CallTimeout: cfg.Plugins.CallTimeout, MemoryLimitPages: cfg.Plugins.MemoryLimitPages})
	if err != nil {
		st.Close()
		return nil, fmt.Errorf("plugin runtime: %w", err)
	}
	rt := snapshot.NewRuntime(st, box, log.With("component", "snapshot"), time.Now)
	rt.Stage = stagePlugins(st, plugs, log.With("component", "plugins"))
	if err := rt.Refresh(ctx); err != nil {
		st.Close()
		return nil, fmt.Errorf("load configuration: %w", err)
	}
	// default_limits: counted in memory, shared through the database.
	lim := limits.New(limits.Options{Store: st, Logger: log.With("component", "limits")})
	// A replica starting (or restarting) enforces the cluster's counts
	// from its first request; a failure is logged and retried each second.
	lim.Sync(ctx)
	rec := usage.NewRecorder(st, usage.Options{Logger: log.With("component", "usage"), OnEvent: func(ev store.RequestEvent) {
		if p := rt.Current().Principal(ev.PrincipalID); p != nil && len(p.Limits) > 0 {
			lim.AddTokens(p.ID, p.Limits, ev.InputTokens+ev.CacheCreationInputTokens+ev.OutputTokens)
		}
	}})

	schedMetrics := scheduler.NewMetrics(reg)
	// Security (issue 19.2): every outbound client to upstreams dials
	// through the destination policy; the listeners join it below.
	dest := &egress.Policy{AllowPrivate: cfg.AllowPrivateUpstreams}
	subs := newSubscriptions(cfg, st, box, rt, log, getenv, dest.Client(30*time.Second))
	subs.warmer.Shape = shapeWarmup(st, plugs)
	ka := &keepalive.Service{Store: st, Box: box, Log: log.With("component", "keepalive"), Metrics: keepalive.NewMetrics(reg),
		Purged: schedMetrics.PromptCachePurgeRemoved, Upstream: func(id string) *snapshot.Upstream { return rt.Current().Upstream(id) },
		HTTP: dest.Client(time.Minute)}
	extra := append(subs.types(cfg), ka.Types(jobs.Interval(cfg.JobIntervals, keepalive.CleanupJob))...)
	jobsHTTP := dest.Client(time.Minute)
	// scheduler/oauth area (issue 18.5): the lazy refresh's bounds and metric.
	subs.Service.Metrics, subs.Service.LazyRefreshTimeout = schedMetrics, cfg.OAuth.LazyRefreshTimeout
	sched, closeSched, err := newScheduler(ctx, cfg, driver, dsn, st, schedMetrics, rt, log, jobsHTTP, extra...)
	if err == nil {
		subs.bind(sched)
		ka.Jobs = sched
		if err = sched.Start(ctx); err != nil {
			closeSched()
		}
	}
	if err != nil {
		// scheduler area (issue 18.6): a scheduler that cannot start (its
		// migration, its pool) must not take the proxy down: this replica
		// serves without it, svc_scheduler_init_failure 1, the scheduler
		// endpoints answer 503 scheduler_unavailable; other replicas'
		// schedulers run the jobs.
		log.Error("durable scheduler failed to start; serving proxy traffic without it (svc_scheduler_init_failure 1)", "error", err)
		sched, closeSched = scheduler.Down(schedulerTypes(cfg, st, schedMetrics, rt, jobsHTTP, extra...), scheduler.Options{Metrics: schedMetrics}, err), func() {}
		subs.bind(sched)
		ka.Jobs = sched
	}

	prices := pricing.NewInstaller(st, log.With("component", "pricing"), time.Now)

	startedAt := time.Now()
	outbound := relay.NewTransport()
	outbound.DialContext = dest.DialContext // security: the destination policy at connect time
	relayOpts := relay.Options{
		Transport: outbound, Source: rt, Recorder: rec, Observer: ka, Plugins: plugs, Limiter: lim, Metrics: relay.NewMetrics(reg), Logger: log.With("component", "relay"),
	}
	cfg.Relay.apply(&relayOpts, cfg.Listeners) // relay area: deadlines and body cap (docs/resilience.md)
	// A request meeting an expired or refused OAuth token asks the OAuth
	// service for a refresh (issue 18.5) and fails over meanwhile.
	relayOpts.Refresher = subs.Service
	relayH := relay.New(relayOpts)
	metricsH := promhttp.HandlerFor(reg, promhttp.HandlerOpts{Registry: reg})
	adminH := admin.New(admin.Deps{
		Store: st, Sealer: box, Runtime: runtimeInfo{rt}, Auth: auth,
		Logger: log.With("component", "admin"), Now: time.Now, Getenv: getenv,
		Version: Version, ReplicaID: cfg.ReplicaID, StartedAt: startedAt, PriceCatalog: installedCatalog{prices},
		OAuth: subs, Plugins: plugs, Dashboard: dashboard.Handler(),
		// Security (issue 19.1, 19.2): what api_key_env may read and where
		// upstreams may point.
		Destinations: dest, KeyEnvAllow: cfg.UpstreamKeyEnvAllow, ReservedEnv: reservedEnv(cfg),
		Extra: map[string]http.Handler{
			"/metrics":          metricsH,
			"/admin/scheduler/": schedulerHandler{sched},
		},
	})

	bg, cancel := context.WithCancel(context.Background())
	go rt.Reconcile(bg, cfg.ReconcileInterval)
	limCtx, limCancel := context.WithCancel(context.Background())
	limDone := make(chan struct{})
	go func() { lim.Run(limCtx); close(limDone) }()
	ka.Start(bg)
	// Local price catalog installation runs in-process on every replica.
	go prices.Run(bg, cfg.ReconcileInterval)
	if driver == "postgres" {
		// Other replicas announce committed changes on the channel; the
		// reconciler above repairs any notification this session misses.
		l := notify.New(dsn, notify.Channel, log.With("component", "notify"), func(ctx context.Context, payload string) {
			if gen, err := strconv.ParseInt(payload, 10, 64); err == nil && gen <= rt.Current().Generation {
				return // our own change, already applied
			}
			if _, err := rt.RefreshIfChanged(ctx); err != nil {
				log.Warn("refresh after notification", "error", err)
			}
		})
		go l.Run(bg)
	}

	r := &running{log: log, st: st, rec: rec, cancel: cancel, life: &lifecycle{}, drain: cfg.DrainTimeout, stopLimits: func() { limCancel(); <-limDone }, errc: make(chan error, 2), sched: sched, closeSched: closeSched}
	proxyLn, err := net.Listen("tcp", cfg.ProxyListen)
	if err != nil {
		r.close()
		return nil, fmt.Errorf("proxy listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		proxyLn.Close()
		r.close()
		return nil, fmt.Errorf("admin listener: %w", err)
	}
	dest.AddSelf(proxyLn.Addr()) // security: no upstream may loop back into this process
	dest.AddSelf(adminLn.Addr())
	errLog := slog.NewLogLogger(log.Handler(), slog.LevelWarn)
	proxySrv := newHTTPServer(relayH, cfg.Listeners, errLog)
	// Changes through the admin listener are audited as the admin API's.
	audited := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		adminH.ServeHTTP(w, r.WithContext(store.WithActor(r.Context(), "admin-api")))
	})
	adminSrv := newHTTPServer(adminFront(audited, metricsH, r.life, metricsToken), cfg.Listeners, errLog)
	r.proxySrv, r.adminSrv = proxySrv, adminSrv
	go func() { r.errc <- proxySrv.Serve(proxyLn) }()
	go func() { r.errc <- adminSrv.Serve(adminLn) }()

	pa, aa := proxyLn.Addr().String(), adminLn.Addr().String()
	client := pa
	if host, port, err := net.SplitHostPort(pa); err == nil && (host == "::" || host == "0.0.0.0" || host == "") {
		client = "localhost:" + port // a wildcard listener: clients on this host use localhost
	}
	log.Info("listening", "listener", "proxy", "addr", pa)
	log.Info("listening", "listener", "admin", "addr", aa)
	fmt.Fprintf(stderr, `
  proxy      http://%s/v1/messages   (ANTHROPIC_BASE_URL=http://%s, key from POST /admin/v1/principals/{id}/keys)
  admin API  http://%s/admin/v1
  dashboard  http://%s/dashboard/
  metrics    http://%s/metrics   (admin token, or the scrape token: %s)
  admin token: %s
  master key:  %s
  database:    %s (%s)

`, pa, client, aa, aa, aa, metricsNote(metricsToken), tokenNote, keyNote, redactURL(cfg.DatabaseURL), driver)
	return r, nil
}

func (r *running) close() {
	r.cancel()
	if r.sched != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
		_ = r.sched.Stop(ctx)
		cancel()
		r.closeSched()
	}
	if r.rec != nil {
		r.rec.Close()
	}
	if r.stopLimits != nil {
		r.stopLimits()
	}
	r.st.Close()
}

// shutdown drains: readiness turns 503, the proxy listener closes (new
// connections are refused) and in-flight requests, long streams included,
// get up to the drain timeout to finish before they are cut. The admin
// listener stays up meanwhile, so probes and scrapes see the drain.
func (r *running) shutdown() error {
	r.life.draining.Store(true)
	r.log.Info("draining", "timeout", r.drain.String())
	ctx, cancel := context.WithTimeout(context.Background(), r.drain)
	defer cancel()
	if err := r.proxySrv.Shutdown(ctx); err != nil {
		r.log.Warn("drain timeout reached; cutting the requests still in flight", "timeout", r.drain.String())
		_ = r.proxySrv.Close()
	}
	actx, acancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer acancel()
	if err := r.adminSrv.Shutdown(actx); err != nil {
		_ = r.adminSrv.Close()
	}
	r.close()
	r.log.Info("stopped")
	return nil
}

func openStore(ctx context.Context, cfg *Config, driver, dsn string, log *slog.Logger) (store.Store, error) {
	switch driver {
	case "sqlite":
		return sqlite.Open(ctx, dsn, sqlite.Options{Logger: log.With("component", "store"), AllowContract: cfg.MigrateContract})
	default:
		return postgres.Open(ctx, dsn, postgres.Options{Logger: log.With("component", "store"), MaxConns: cfg.Database.MainPool, AllowContract: cfg.MigrateContract})
	}
}

// checkServerBudget refuses to start when the configured pools and replica
// count do not fit the server's max_connections.
func checkServerBudget(ctx context.Context, cfg *Config, dsn string) error {
	cctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	conn, err := pgx.Connect(cctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to PostgreSQL: %w", err)
	}
	defer conn.Close(context.Background())
	var max int
	if err := conn.QueryRow(cctx, "SELECT current_setting('max_connections')::int").Scan(&max); err != nil {
		return fmt.Errorf("read max_connections: %w", err)
	}
	return CheckBudget(cfg.Database.MainPool, cfg.Database.SchedulerPool, cfg.Database.Replicas, max)
}

// masterKey returns the AEAD master key: PROXY_MASTER_KEY, or on the embedded
// default a key file beside the database, created with mode 0600.
func masterKey(driver, dsn string, getenv func(string) string) ([]byte, string, error) {
	if v := getenv("PROXY_MASTER_KEY"); v != "" {
		k, err := secret.ParseKey(v)
		if err != nil {
			return nil, "", fmt.Errorf("PROXY_MASTER_KEY: %w", err)
		}
		return k, "from $PROXY_MASTER_KEY", nil
	}
	if driver != "sqlite" {
		return nil, "", errors.New("PROXY_MASTER_KEY is required with PostgreSQL: every replica must share one master key (32 bytes, hex or base64)")
	}
	path := dsn + ".key"
	k, created, err := secret.LoadOrCreateKeyFile(path)
	if err != nil {
		return nil, "", fmt.Errorf("master key file: %w", err)
	}
	note := "in " + path + " (mode 0600; back it up: credentials cannot be decrypted without it)"
	if created {
		note = "generated into " + path + " (mode 0600; back it up: credentials cannot be decrypted without it)"
	}
	return k, note, nil
}

// adminAuth builds the admin authentication providers. Without configured
// providers a static token comes from PROXY_ADMIN_TOKEN; on the embedded
// default, absent that, a token file beside the database.
func adminAuth(cfg *Config, driver, dsn string, getenv func(string) string) ([]admin.Authenticator, string, error) {
	var out []admin.Authenticator
	var notes []string
	for i, p := range cfg.Admin.Auth.Providers {
		tok := getenv(p.TokenEnv)
		if tok == "" {
			return nil, "", fmt.Errorf("admin.auth.providers[%d]: environment variable %s is empty", i, p.TokenEnv)
		}
		out = append(out, admin.StaticToken{Token: tok})
		notes = append(notes, "from $"+p.TokenEnv)
	}
	if len(out) > 0 {
		return out, strings.Join(notes, ", "), nil
	}
	if tok := getenv("PROXY_ADMIN_TOKEN"); tok != "" {
		return []admin.Authenticator{admin.StaticToken{Token: tok}}, "from $PROXY_ADMIN_TOKEN", nil
	}
	if driver != "sqlite" {
		return nil, "", errors.New("no admin token: set PROXY_ADMIN_TOKEN or configure admin.auth.providers")
	}
	path := dsn + ".admin-token"
	data, err := secret.ReadSecretFile(path)
	tok := strings.TrimSpace(string(data))
	if errors.Is(err, os.ErrNotExist) || (err == nil && tok == "") {
		b := make([]byte, 32)
		if _, err := rand.Read(b); err != nil {
			return nil, "", err
		}
		tok = "adm-" + base64.RawURLEncoding.EncodeToString(b)
		if err := secret.WriteFileAtomic(path, []byte(tok+"\n")); err != nil {
			return nil, "", fmt.Errorf("admin token file: %w", err)
		}
	} else if err != nil {
		return nil, "", fmt.Errorf("admin token file: %w", err)
	}
	abs, _ := filepath.Abs(path)
	return []admin.Authenticator{admin.StaticToken{Token: tok}}, "in " + abs + ` (export PROXY_ADMIN_TOKEN="$(cat ` + path + `)")`, nil
}

// runtimeInfo adapts the snapshot runtime to the admin API's view of it.
type runtimeInfo struct{ rt *snapshot.Runtime }

func (r runtimeInfo) Refresh(ctx context.Context) error { return r.rt.Refresh(ctx) }

func (r runtimeInfo) Info() admin.SnapshotInfo {
	s := r.rt.Current()
	u, p, k := s.Counts()
	return admin.SnapshotInfo{Generation: s.Generation, BuiltAt: s.BuiltAt, Upstreams: u, Principals: p, Keys: k}
}

// newScheduler opens the scheduler's own connection pool on the gateway's
// database and registers the durable job types.
func newScheduler(ctx context.Context, cfg *Config, driver, dsn string, st store.Store, m *scheduler.Metrics, rt *snapshot.Runtime, log *slog.Logger, httpc *http.Client, extra ...scheduler.Type) (*scheduler.Scheduler, func(), error) {
	types := schedulerTypes(cfg, st, m, rt, httpc, extra...)
	o := scheduler.Options{Logger: log.With("component", "scheduler"), Metrics: m, Workers: cfg.SchedulerWorkers, ID: cfg.ReplicaID,
		RescueAfter: cfg.SchedulerRescueAfter}
	if driver == "sqlite" {
		db, err := sqlite.OpenDB(dsn)
		if err != nil {
			return nil, nil, err
		}
		db.SetMaxOpenConns(1) // River on SQLite: one connection avoids SQLITE_BUSY between its own goroutines
		s, err := scheduler.NewSQLite(ctx, db, types, o)
		if err != nil {
			db.Close()
			return nil, nil, fmt.Errorf("scheduler: %w", err)
		}
		return s, func() { db.Close() }, nil
	}
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	pcfg.MaxConns = int32(cfg.Database.SchedulerPool)
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, nil, err
	}
	s, err := scheduler.NewPostgres(ctx, pool, types, o)
	if err != nil {
		pool.Close()
		return nil, nil, fmt.Errorf("scheduler: %w", err)
	}
	return s, pool.Close, nil
}

// schedulerTypes are the durable job types of the gateway.
func schedulerTypes(cfg *Config, st store.Store, m *scheduler.Metrics, rt *snapshot.Runtime, httpc *http.Client, extra ...scheduler.Type) []scheduler.Type {
	types := jobs.Types(jobs.Deps{Store: st, Metrics: m, Retention: cfg.Retention, CatalogURL: cfg.PriceCatalogURL, HTTP: httpc,
		Every: cfg.JobIntervals, Upstreams: func() []*snapshot.Upstream { return rt.Current().Upstreams }})
	return append(types, extra...)
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

// scrapeToken is the read-only credential of /metrics: PROXY_METRICS_TOKEN,
// or the contents of the file PROXY_METRICS_TOKEN_FILE names (mode 0600 or
// stricter). Empty: /metrics takes only the admin token.
func scrapeToken(getenv func(string) string) (string, error) {
	if v := getenv("PROXY_METRICS_TOKEN"); v != "" {
		return strings.TrimSpace(v), nil
	}
	path := getenv("PROXY_METRICS_TOKEN_FILE")
	if path == "" {
		return "", nil
	}
	data, err := secret.ReadSecretFile(path)
	if err != nil {
		return "", fmt.Errorf("PROXY_METRICS_TOKEN_FILE: %w", err)
	}
	tok := strings.TrimSpace(string(data))
	if tok == "" {
		return "", fmt.Errorf("PROXY_METRICS_TOKEN_FILE: %s is empty", path)
	}
	return tok, nil
}

func metricsNote(tok string) string {
	if tok == "" {
		return "none set"
	}
	return "set"
}

// reservedEnv are the variables api_key_env may never name besides PROXY_*:
// the ones holding admin tokens (security, issue 19.1).
func reservedEnv(cfg *Config) []string {
	var out []string
	for _, p := range cfg.Admin.Auth.Providers {
		out = append(out, p.TokenEnv)
	}
	return out
}
