// Package controller is pillar-controller: its command line, the CSI
// controller service on a static stores file (--standalone-stores:
// development, tests, csi-sanity) or inside Kubernetes under the
// controller-runtime manager (kubecontroller).
package controller

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	"google.golang.org/grpc"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/pillarhq/pillar/impl/pillar/agentclient"
	"github.com/pillarhq/pillar/impl/pillar/csicontroller"
	"github.com/pillarhq/pillar/impl/pillar/csiserver"
	"github.com/pillarhq/pillar/impl/pillar/kubecontroller"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/pillar/stores"
	"github.com/pillarhq/pillar/impl/service"
)

// Version is set at build time (-X …/impl/pillar/controller.Version=…).
var Version = "dev"

// Option changes how the manager is built. The binary passes none; the
// envtest suite names its API server, runs several replicas in one
// process and waits for the election.
type Option func(*options)

type options struct {
	rest              *rest.Config
	inProcessReplicas bool
	elected           func()
}

// WithRestConfig is the API server to use instead of ctrl.GetConfig's
// (kubeconfig or the pod's service account).
func WithRestConfig(cfg *rest.Config) Option { return func(o *options) { o.rest = cfg } }

// InProcessReplicas lets several managers run in one process.
func InProcessReplicas() Option { return func(o *options) { o.inProcessReplicas = true } }

// WithElected calls f once this replica leads.
func WithElected(f func()) Option { return func(o *options) { o.elected = f } }

// Main is pillar-controller: it parses args and serves until ctx ends.
// Usage errors are cli.UsageError.
func Main(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer, opts ...Option) error {
	c, err := ParseConfig(args, stderr)
	if err != nil {
		return err
	}
	log, err := logging.New(stderr, c.LogLevel)
	if err != nil {
		return err
	}
	agents, err := agentclient.New(c.MTLSCertDir, c.MTLSServerName)
	if err != nil {
		return err
	}
	defer agents.Close()
	if c.StandaloneStores == "" {
		ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
		mgr, err := NewManager(c, agents, log, opts...)
		if err != nil {
			return err
		}
		return mgr.Start(ctx)
	}
	src, err := stores.LoadFile(c.StandaloneStores)
	if err != nil {
		return err
	}
	return serveCSI(ctx, c, service.Init(service.Options{Logger: log}, &csicontroller.Server{Stores: src, Agents: agents}), log)
}

// NewManager is the controller inside Kubernetes: reconcilers on the
// leader, webhooks and the CSI service (on c.Endpoint) on every replica.
// Main runs it; so does the envtest suite.
func NewManager(c *Config, agents csicontroller.Agents, log *slog.Logger, opts ...Option) (manager.Manager, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	cfg := o.rest
	if cfg == nil {
		var err error
		if cfg, err = ctrl.GetConfig(); err != nil {
			return nil, fmt.Errorf("no Kubernetes configuration (use --standalone-stores outside a cluster): %w", err)
		}
	}
	return kubecontroller.NewManager(cfg, kubecontroller.Options{
		Group: c.Driver, AgentPort: c.AgentPort, Agents: agents, Log: log,
		MetricsAddr: c.MetricsAddr, ProbeAddr: c.ProbeAddr,
		LeaderElect: c.LeaderElect, LeaderElectionNamespace: c.LeaderElectionNamespace,
		WebhookPort: c.WebhookPort, WebhookCertDir: c.WebhookCertDir,
		InProcessReplicas: o.inProcessReplicas, Elected: o.elected,
		Serve: func(ctx context.Context, src kubecontroller.Source, ov kubecontroller.Overrides) error {
			return serveCSI(ctx, c, service.Init(service.Options{Logger: log}, &csicontroller.Server{Stores: src, Agents: agents, Overrides: ov, Hosts: kubecontroller.Hosts{Config: src.Config}}), log) //nolint:staticcheck // S1016: a conversion would hide that Hosts reads with the same client configuration
		},
	})
}

// serveCSI serves the Identity and Controller services until ctx ends.
func serveCSI(ctx context.Context, c *Config, srv *csicontroller.Server, log *slog.Logger) error {
	lis, err := csiserver.Listen(c.Endpoint)
	if err != nil {
		return err
	}
	// The manager serves controller-runtime's registry on its metrics
	// address (the chart's controller.metricsPort).
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(csiserver.Logging(log), csiserver.Metrics(ctrlmetrics.Registry)))
	csi.RegisterIdentityServer(gs, &csiserver.Identity{Name: c.Driver, Version: Version, Controller: true, Topology: true})
	csi.RegisterControllerServer(gs, srv)
	stopped := make(chan struct{})
	defer close(stopped)
	go func() {
		select {
		case <-ctx.Done():
			gs.GracefulStop()
		case <-stopped:
		}
	}()
	log.Info("controller_started", "endpoint", c.Endpoint, "standalone", c.StandaloneStores != "", "mtls", c.MTLSCertDir != "", "version", Version)
	return gs.Serve(lis)
}
