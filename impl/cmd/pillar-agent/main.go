// Command pillar-agent runs on storage nodes: it carves volumes out of the
// configured ZFS pools and LVM volume groups and exports them over NVMe/TCP
// through the kernel target, serving the agent gRPC API (plaintext, or
// mTLS with --mtls-cert-dir). With --sim-root it runs on the simulated
// storage tools and configfs instead (development and tests).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pillarhq/pillar/impl/pillar/agent"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/pillar/mtls"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Version is set at build time.
var Version = "dev"

type options struct {
	config      string
	checkConfig bool
	listen      string
	healthAddr  string
	mtlsDir     string
	nvmetRoot   string
	nvmetAddr   string
	nvmetPort   int
	nvmetPortID int
	toolsDir    string
	deviceRoot  string
	simRoot     string
	simPoolSize string
	logLevel    string
	version     bool
	metrics     string // issue 20.8: Prometheus /metrics listen address
}

func main() {
	// Under a storage tool's name the binary is that simulated tool
	// (the links --sim-root makes).
	if code, ok := runAsTool(os.Args); ok {
		os.Exit(code)
	}
	os.Exit(run(os.Args[1:]))
}

func run(args []string) int {
	var o options
	fs := flag.NewFlagSet("pillar-agent", flag.ContinueOnError)
	fs.StringVar(&o.config, "config", "/etc/pillar-csi/agent/config.yaml", "agent configuration file (the backends list)")
	fs.BoolVar(&o.checkConfig, "check-config", false, "validate the configuration and exit (0 when valid)")
	fs.StringVar(&o.listen, "listen", ":9500", "gRPC listen address")
	fs.StringVar(&o.healthAddr, "health-listen", "", "plain HTTP address of the liveness endpoint GET /healthz (empty: none)")
	fs.StringVar(&o.mtlsDir, "mtls-cert-dir", "", "directory with tls.crt, tls.key and ca.crt; enables mTLS (client certificates required)")
	fs.StringVar(&o.nvmetRoot, "nvmet-root", nvmet.DefaultRoot, "the kernel NVMe target's configfs directory")
	fs.StringVar(&o.nvmetAddr, "nvmet-address", "0.0.0.0", "address the NVMe/TCP port listens on (0.0.0.0: every IPv4 address of the node)")
	fs.IntVar(&o.nvmetPort, "nvmet-port", 4420, "NVMe/TCP service port")
	fs.IntVar(&o.nvmetPortID, "nvmet-port-id", 1, "configfs id of the target port the agent owns")
	fs.StringVar(&o.toolsDir, "tools-dir", "", "directory holding zfs, zpool and the LVM tools (default: PATH)")
	fs.StringVar(&o.deviceRoot, "device-root", "/dev", "directory standing for /dev in device paths")
	fs.StringVar(&o.simRoot, "sim-root", "", "run on simulated storage tools and configfs kept in this directory (development and tests)")
	fs.StringVar(&o.simPoolSize, "sim-pool-size", "", "with --sim-root: create configured pools and volume groups missing from the simulation with this size (e.g. 10G)")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.BoolVar(&o.version, "version", false, "print the version and exit")
	fs.StringVar(&o.metrics, "metrics-listen", "", "address of the Prometheus /metrics endpoint (pool capacity, exports, call durations); empty disables it")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if o.version {
		fmt.Println(Version)
		return 0
	}
	log, err := logging.New(o.logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-agent: %v\n", err)
		return 2
	}

	cfg, err := agentconfig.Load(o.config)
	if err != nil {
		// One line per problem, each naming its path (S-AG-1, S-AG-8).
		fmt.Fprintf(os.Stderr, "pillar-agent: invalid configuration %s:\n", o.config)
		if fes := agentconfig.FieldErrors(err); len(fes) > 0 {
			for _, fe := range fes {
				fmt.Fprintf(os.Stderr, "  %s\n", fe)
			}
		} else {
			fmt.Fprintf(os.Stderr, "  %v\n", err)
		}
		return 1
	}
	if o.checkConfig {
		fmt.Printf("%s: %d backend(s), valid\n", o.config, len(cfg.Backends))
		return 0
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, o, cfg, log); err != nil {
		log.Error("agent_failed", "error", err.Error())
		return 1
	}
	return 0
}

func serve(ctx context.Context, o options, cfg *agentconfig.Config, log *slog.Logger) error {
	var run backend.Runner = &backend.ExecRunner{Dir: o.toolsDir}
	deviceRoot := o.deviceRoot
	var cfs nvmet.FS = nvmet.OSFS{}
	if o.simRoot != "" {
		s, err := openSim(o.simRoot, o.nvmetRoot, o.simPoolSize, cfg)
		if err != nil {
			return fmt.Errorf("--sim-root: %w", err)
		}
		run, deviceRoot, cfs = s.runner, s.deviceRoot, s.configfs
		log.Info("simulated_storage", "root", o.simRoot, "device_root", deviceRoot)
	}
	backends, err := agent.Backends(cfg, run, deviceRoot)
	if err != nil {
		return err
	}
	family := "ipv4"
	if ip := net.ParseIP(o.nvmetAddr); ip != nil && ip.To4() == nil {
		family = "ipv6"
	}
	exp := &nvmet.Exporter{FS: cfs, Root: o.nvmetRoot, Port: nvmet.Port{ID: o.nvmetPortID, Address: o.nvmetAddr, Service: o.nvmetPort, Family: family}}
	srv := agent.New(agent.Options{Backends: backends, Exporter: exp, Logger: log, Version: Version})

	var opts []grpc.ServerOption
	interceptors := []grpc.UnaryServerInterceptor{agent.LogCalls(log)}
	var metricsSrv *http.Server
	if o.metrics != "" {
		reg := prometheus.NewRegistry()
		m := agent.NewMetrics(srv, reg)
		interceptors = append(interceptors, m.Interceptor())
		mux := http.NewServeMux()
		mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
		ml, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("--metrics-listen: %w", err)
		}
		metricsSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
		go func() { _ = metricsSrv.Serve(ml) }()
		defer metricsSrv.Close()
		log.Info("metrics_listening", "address", ml.Addr().String())
	}
	opts = append(opts, grpc.ChainUnaryInterceptor(interceptors...))
	if o.mtlsDir != "" {
		tc, err := mtls.Server(o.mtlsDir)
		if err != nil {
			return err
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tc)))
	}
	gs := grpc.NewServer(opts...)
	agentv1.RegisterAgentServiceServer(gs, srv)
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return err
	}
	// Exports live in the kernel and outlive the agent; report what a
	// restart found so an operator sees nothing was lost.
	if targets, err := exp.List(); err == nil {
		log.Info("exports_recovered", "count", len(targets))
	}
	h, _ := srv.GetHealth(ctx, nil)
	for _, p := range h.GetPools() {
		log.Info("pool_discovered", "pool", p.GetName(), "kind", p.GetKind().String(), "discovered", p.GetDiscovered(), "healthy", p.GetHealthy(), "reason", p.GetReason())
	}
	log.Info("agent_started", "listen", lis.Addr().String(), "mtls", o.mtlsDir != "", "backends", len(cfg.Backends), "target_ready", h.GetTargetReady(), "version", Version)

	errc := make(chan error, 2)
	go func() { errc <- gs.Serve(lis) }()
	if o.healthAddr != "" {
		hl, err := net.Listen("tcp", o.healthAddr)
		if err != nil {
			gs.Stop()
			return fmt.Errorf("--health-listen: %w", err)
		}
		hsrv := &http.Server{Handler: agent.Probe{Health: hs}, ReadHeaderTimeout: 5 * time.Second}
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

// absPath is p made absolute (for the simulated tools' links).
func absPath(p string) string {
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
