package agent

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pillarhq/pillar/impl/cli"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/pillar/mtls"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Version is set at build time (-X …/impl/pillar/agent.Version=…).
var Version = "dev"

// Storage is what the backends and the exporter run on. A zero field
// keeps the node's own: the tools on PATH (or --tools-dir), --device-root,
// the kernel's configfs and --state-dir.
type Storage struct {
	Runner     backend.Runner
	DeviceRoot string
	Target     nvmet.FS
	StateDir   string
}

// Option changes how Main wires the agent. Production passes none; the
// simulated storage node (conformance/simnode) replaces the storage.
type Option func(*options)

type options struct {
	flags   []cli.FlagBinder[Config]
	storage func(c *Config, backends *agentconfig.Config, log *slog.Logger) (Storage, error)
	stdout  io.Writer
}

func collect(opts []Option) *options {
	o := &options{stdout: os.Stdout}
	for _, opt := range opts {
		opt(o)
	}
	return o
}

// WithFlags binds more flags into Main's flag set; the check it returns
// (nil: none) runs with the others once the command line is parsed.
func WithFlags(bind func(fs *flag.FlagSet) (check func(*Config) error)) Option {
	return func(o *options) { o.flags = append(o.flags, bind) }
}

// WithStorage makes the agent run on the storage open returns, called
// once the backends configuration is loaded (a simulation sizes its
// pools from it).
func WithStorage(open func(c *Config, backends *agentconfig.Config, log *slog.Logger) (Storage, error)) Option {
	return func(o *options) { o.storage = open }
}

// WithStdout is where --version and --check-config print (default
// os.Stdout).
func WithStdout(w io.Writer) Option { return func(o *options) { o.stdout = w } }

// Main is pillar-agent: it parses args, loads the backends file and
// serves the agent API until ctx ends. Usage errors are cli.UsageError.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, opts ...Option) error {
	o := collect(opts)
	c, err := parseConfig(args, stderr, o)
	if err != nil {
		return err
	}
	if c.Version {
		fmt.Fprintln(o.stdout, Version)
		return nil
	}
	log, err := logging.New(stderr, c.LogLevel)
	if err != nil {
		return err
	}
	cfg, err := agentconfig.Load(c.ConfigFile)
	if err != nil {
		return invalidConfig(c.ConfigFile, err)
	}
	if c.CheckConfig {
		fmt.Fprintf(o.stdout, "%s: %d backend(s), valid\n", c.ConfigFile, len(cfg.Backends))
		return nil
	}
	return serve(ctx, c, cfg, log, o)
}

// invalidConfig lists one problem a line, each naming its path (S-AG-1,
// S-AG-8).
func invalidConfig(file string, err error) error {
	var b strings.Builder
	fmt.Fprintf(&b, "invalid configuration %s:", file)
	if fes := agentconfig.FieldErrors(err); len(fes) > 0 {
		for _, fe := range fes {
			fmt.Fprintf(&b, "\n  %s", fe)
		}
	} else {
		fmt.Fprintf(&b, "\n  %v", err)
	}
	return errors.New(b.String())
}

// openStorage is the node's own storage with what an option replaced.
func openStorage(c *Config, cfg *agentconfig.Config, log *slog.Logger, o *options) (Storage, error) {
	s := Storage{}
	if o.storage != nil {
		var err error
		if s, err = o.storage(c, cfg, log); err != nil {
			return s, err
		}
	}
	if s.Runner == nil {
		s.Runner = &backend.ExecRunner{Dir: c.ToolsDir}
	}
	if s.DeviceRoot == "" {
		s.DeviceRoot = c.DeviceRoot
	}
	if s.Target == nil {
		s.Target = nvmet.OSFS{}
	}
	if s.StateDir == "" {
		s.StateDir = c.StateDir
	}
	return s, nil
}

func serve(ctx context.Context, c *Config, cfg *agentconfig.Config, log *slog.Logger, o *options) error {
	st, err := openStorage(c, cfg, log, o)
	if err != nil {
		return err
	}
	backends, err := Backends(cfg, st.Runner, st.DeviceRoot)
	if err != nil {
		return err
	}
	family := "ipv4"
	if ip := net.ParseIP(c.NvmetAddress); ip != nil && ip.To4() == nil {
		family = "ipv6"
	}
	exp := &nvmet.Exporter{FS: st.Target, Root: c.NvmetRoot, Port: nvmet.Port{ID: c.NvmetPortID, Address: c.NvmetAddress, Service: c.NvmetPort, Family: family}}
	srv, err := New(Options{Backends: backends, Exporter: exp, Logger: log, Version: Version, StateDir: st.StateDir})
	if err != nil {
		return err
	}

	var opts []grpc.ServerOption
	interceptors := []grpc.UnaryServerInterceptor{LogCalls(log)}
	if c.MetricsListen != "" {
		reg := prometheus.NewRegistry()
		m := NewMetrics(srv, reg)
		interceptors = append(interceptors, m.Interceptor())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ml, err := net.Listen("tcp", c.MetricsListen)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		metricsSrv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = metricsSrv.Serve(ml) }()
		defer metricsSrv.Close()
		log.Info("metrics_listening", "address", ml.Addr().String())
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(interceptors...))
	if c.MTLSCertDir != "" {
		tc, err := mtls.Server(c.MTLSCertDir)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gs := grpc.NewServer(opts...)
	agentv1.RegisterAgentServiceServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)

	lis, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return err
	}
	// Exports live in the kernel and outlive the agent; report what a
	// restart found so an operator sees nothing was lost.
	if targets, err := exp.List(); err == nil {
		log.Info("exports_recovered", "count", len(targets), "generations", srv.gens.len(), "state_dir", st.StateDir)
	}
	h, _ := srv.GetHealth(ctx, nil)
	for _, p := range h.GetPools() {
		log.Info("pool_discovered", "pool", p.GetName(), "kind", p.GetKind().String(), "discovered", p.GetDiscovered(), "healthy", p.GetHealthy(), "reason", p.GetReason())
	}
	log.Info("agent_started", "listen", lis.Addr().String(), "mtls", c.MTLSCertDir != "", "backends", len(cfg.Backends), "target_ready", h.GetTargetReady(), "version", Version)

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(lis) }()
	if c.HealthListen != "" {
		hl, err := net.Listen("tcp", c.HealthListen)
		if err != nil {
			gs.Stop()
			return fmt.Errorf("--health-listen: %w", err)
		}
		hsrv := &http.Server{Handler: Probe{Health: hs}, ReadHeaderTimeout: 5 * time.Second}
		go func() { errc <- hsrv.Serve(hl) }()
		defer hsrv.Close()
		log.Info("health_listening", "listen", hl.Addr().String())
	}
	select {
	case <-ctx.Done():
		hs.Shutdown()
		gs.GracefulStop()
		log.Info("agent_stopped")
		return nil
	case err := <-errc:
		if errors.Is(err, grpc.ErrServerStopped) {
			return nil
		}
		return err
	}
}
