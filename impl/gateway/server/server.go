// Package server wires the proxy binary: configuration, storage, the
// snapshot runtime, the proxy and admin listeners, and their shutdown.
package server

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/egress"
	"github.com/pillarhq/pillar/impl/gateway/plugins"
	"github.com/pillarhq/pillar/impl/gateway/relay"
	"github.com/pillarhq/pillar/impl/gateway/scheduler"
	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/tracing"
	"github.com/pillarhq/pillar/impl/gateway/usage"
	"github.com/pillarhq/pillar/impl/service"
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
		return errors.Join(fmt.Errorf("listener stopped: %w", err), s.shutdown())
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
	// plugs is the plugin runtime: its metered-call watcher and compiled
	// modules go with the process's other services.
	plugs *plugins.Runtime
	// tracing exports the spans still buffered at close (nil: off).
	tracing *tracing.Provider
	// proxySrv drains first (its listener closes at once); adminSrv keeps
	// answering /readyz (503) and /metrics until the drain ends.
	proxySrv, adminSrv *http.Server
	// proxyAddr and adminAddr are where the listeners were bound.
	proxyAddr, adminAddr string
	life                 *lifecycle
	drain                time.Duration
	loops                *service.Group
	errc                 chan error
	sched                *scheduler.Scheduler
	closeSched           func()
	// stopLimits hands the last limit counts to the database (after the
	// recorder counted the last tokens, before the store closes).
	stopLimits func()
	// inflight counts the proxy's handlers; cutInFlight cancels their
	// requests' base context with relay.ErrShuttingDown when the drain
	// times out, so each ends visibly and records its event.
	inflight    *inFlight
	cutInFlight context.CancelCauseFunc
}

// cutGrace is how long the requests cut at the end of the drain get to
// tell their clients and hand over their events before their connections
// are closed; closeGrace, how long handlers then get to return.
const (
	cutGrace   = time.Second
	closeGrace = 500 * time.Millisecond
)

// start brings the proxy up in phases: the secrets (before anything is
// touched), the storage, the runtime on it, the scheduler, the handlers,
// the background loops, then the listeners. cfg has been validated, so its
// database URL is already parsed.
func start(ctx context.Context, cfg *Config, getenv func(string) string, log *slog.Logger, stderr io.Writer) (*running, error) {
	sec, err := loadSecrets(cfg, getenv)
	if err != nil {
		return nil, err
	}
	if err := sec.startSignIn(ctx, cfg, getenv, log); err != nil {
		return nil, err
	}
	stor, err := openStorage(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	if err := rebindCredentials(ctx, stor.st, sec.box, log); err != nil {
		stor.st.Close()
		return nil, err
	}
	g, err := buildRuntime(ctx, cfg, stor, sec.box, getenv, log)
	if err != nil {
		stor.st.Close()
		return nil, err
	}
	g.startScheduler(ctx)
	h := g.handlers(sec)
	r := g.startBackground()
	pa, aa, err := r.listen(cfg, g.dest, h, sec.metricsToken)
	if err != nil {
		r.close()
		return nil, err
	}
	printBanner(stderr, pa, aa, cfg.db, sec)
	return r, nil
}

// listen opens the proxy and admin listeners and serves them. No upstream
// may point back at either (dest learns their addresses).
func (r *running) listen(cfg *Config, dest *egress.Policy, h handlers, metricsToken string) (proxyAddr, adminAddr string, err error) {
	proxyLn, err := net.Listen("tcp", cfg.ProxyListen)
	if err != nil {
		return "", "", fmt.Errorf("proxy listener: %w", err)
	}
	adminLn, err := net.Listen("tcp", cfg.AdminListen)
	if err != nil {
		proxyLn.Close()
		return "", "", fmt.Errorf("admin listener: %w", err)
	}
	dest.AddSelf(proxyLn.Addr()) // security: no upstream may loop back into this process
	dest.AddSelf(adminLn.Addr())
	errLog := slog.NewLogLogger(r.log.Handler(), slog.LevelWarn)
	r.inflight = newInFlight()
	proxySrv := newHTTPServer(r.inflight.wrap(h.relay), cfg.Listeners, errLog)
	base, cut := context.WithCancelCause(context.Background())
	proxySrv.BaseContext = func(net.Listener) context.Context { return base }
	r.cutInFlight = cut
	// Changes through the admin listener are audited as the admin API's.
	audited := http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		h.admin.ServeHTTP(w, req.WithContext(store.WithActor(req.Context(), "admin-api")))
	})
	adminSrv := newHTTPServer(adminFront(audited, h.metrics, r.life, metricsToken), cfg.Listeners, errLog)
	r.proxySrv, r.adminSrv = proxySrv, adminSrv
	go func() { r.errc <- proxySrv.Serve(proxyLn) }()
	go func() { r.errc <- adminSrv.Serve(adminLn) }()
	proxyAddr, adminAddr = proxyLn.Addr().String(), adminLn.Addr().String()
	r.proxyAddr, r.adminAddr = proxyAddr, adminAddr
	r.log.Info("listening", "listener", "proxy", "addr", proxyAddr)
	r.log.Info("listening", "listener", "admin", "addr", adminAddr)
	if cfg.Debug.Pprof {
		r.log.Warn("profiling endpoint enabled (debug.pprof): admin token holders can read profiles", "url", "http://"+adminAddr+pprofPath)
	}
	return proxyAddr, adminAddr, nil
}

// printBanner tells the operator where everything is and where the
// secrets came from (never their values).
func printBanner(w io.Writer, pa, aa string, db DatabaseURL, sec *secrets) {
	client := pa
	if host, port, err := net.SplitHostPort(pa); err == nil && (host == "::" || host == "0.0.0.0" || host == "") {
		client = "localhost:" + port // a wildcard listener: clients on this host use localhost
	}
	fmt.Fprintf(w, `
  proxy      http://%s/v1/messages   (ANTHROPIC_BASE_URL=http://%s, key from POST /admin/v1/principals/{id}/keys)
  admin API  http://%s/admin/v1
  dashboard  http://%s/dashboard/
  metrics    http://%s/metrics   (admin token, or the scrape token: %s)
  admin token: %s
  master key:  %s
  database:    %s (%s)

`, pa, client, aa, aa, aa, metricsNote(sec.metricsToken), sec.tokenNote, sec.keyNote, db, db.Driver)
}

func (r *running) close() {
	r.loops.Stop()
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
	if r.plugs != nil {
		_ = r.plugs.Close(context.Background()) // releases memory only; nothing to report at exit
	}
	stopTracing(r.tracing)
	r.st.Close()
}

// shutdown drains: readiness turns 503, the proxy listener closes (new
// connections are refused) and in-flight requests, long streams included,
// get up to the drain timeout to finish before they are cut. The admin
// listener stays up meanwhile, so probes and scrapes see the drain.
// cut ends the requests still in flight after the drain: each is told
// (relay.ErrShuttingDown: a stream gets the error event, a request still
// waiting for its upstream a 503) and hands its request event to the
// recorder; connections still open after cutGrace are closed, and the
// recorder is closed only after every handler returned (or closeGrace).
func (r *running) cut() {
	r.cutInFlight(relay.ErrShuttingDown)
	ctx, cancel := context.WithTimeout(context.Background(), cutGrace)
	defer cancel()
	if !r.inflight.wait(ctx) {
		r.log.Warn("requests still in flight after the cut; closing their connections", "grace", cutGrace.String())
	}
	_ = r.proxySrv.Close()
	cctx, ccancel := context.WithTimeout(context.Background(), closeGrace)
	defer ccancel()
	if !r.inflight.wait(cctx) {
		r.log.Warn("proxy handlers still running at exit; their request events are lost", "in_flight", r.inflight.n.Load())
	}
}

func (r *running) shutdown() error {
	r.life.draining.Store(true)
	r.log.Info("draining", "timeout", r.drain.String())
	ctx, cancel := context.WithTimeout(context.Background(), r.drain)
	defer cancel()
	if err := r.proxySrv.Shutdown(ctx); err != nil {
		r.log.Warn("drain timeout reached; cutting the requests still in flight", "timeout", r.drain.String())
		r.cut()
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
