// Command pillar-controller is the CSI controller. With --standalone-stores
// it runs outside Kubernetes on a static stores file (development, tests,
// csi-sanity); otherwise it runs the controller-runtime manager.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/pillarhq/pillar/impl/pillar/agentclient"
	"github.com/pillarhq/pillar/impl/pillar/csicontroller"
	"github.com/pillarhq/pillar/impl/pillar/csiserver"
	"github.com/pillarhq/pillar/impl/pillar/logging"
	"github.com/pillarhq/pillar/impl/pillar/stores"
)

// Version is set at build time.
var Version = "dev"

type options struct {
	driver, endpoint       string
	standalone             string
	mtlsDir, mtlsName      string
	probeAddr, metricsAddr string
	leaderElect            bool
	leaderNS               string
	agentPort              int
	webhookPort            int
	webhookCertDir         string
	logLevel               string
}

func main() { os.Exit(run(os.Args[1:])) }

func run(args []string) int {
	var o options
	fs := flag.NewFlagSet("pillar-controller", flag.ContinueOnError)
	fs.StringVar(&o.driver, "driver-name", "pillar-csi.pillarhq.io", "CSI driver name (also the API group and label domain)")
	fs.StringVar(&o.endpoint, "csi-endpoint", "unix:///csi/csi.sock", "CSI endpoint (unix:///path or tcp://host:port)")
	fs.StringVar(&o.standalone, "standalone-stores", "", "run outside Kubernetes with the stores of this file")
	fs.StringVar(&o.mtlsDir, "mtls-cert-dir", "", "tls.crt, tls.key, ca.crt for mTLS to the agents (plaintext when empty)")
	fs.StringVar(&o.mtlsName, "mtls-server-name", "", "server name checked against agent certificates (default: the dialled host)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081", "health probe address")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":8080", "metrics address")
	fs.BoolVar(&o.leaderElect, "leader-elect", false, "elect a leader among replicas for the reconcilers")
	fs.StringVar(&o.leaderNS, "leader-election-namespace", "", "namespace of the leader-election lease")
	fs.IntVar(&o.agentPort, "agent-port", 9500, "agent gRPC port for agents naming none")
	fs.IntVar(&o.webhookPort, "webhook-port", 0, "webhook server port (0: off)")
	fs.StringVar(&o.webhookCertDir, "webhook-cert-dir", "", "webhook serving certificate directory")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log, err := logging.New(o.logLevel)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-controller: %v\n", err)
		return 2
	}
	agents, err := agentclient.New(o.mtlsDir, o.mtlsName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-controller: %v\n", err)
		return 1
	}
	defer agents.Close()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if o.standalone == "" {
		return runManager(ctx, o, agents, log)
	}
	src, err := stores.LoadFile(o.standalone)
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-controller: %v\n", err)
		return 1
	}
	if err := serveCSI(ctx, o, &csicontroller.Server{Stores: src, Agents: agents, Log: log}, log); err != nil {
		log.Error("controller_failed", "error", err.Error())
		return 1
	}
	return 0
}

// serveCSI serves the Identity and Controller services until ctx ends.
func serveCSI(ctx context.Context, o options, ctrl *csicontroller.Server, log *slog.Logger) error {
	lis, err := csiserver.Listen(o.endpoint)
	if err != nil {
		return err
	}
	// The manager serves controller-runtime's registry on its metrics
	// address (the chart's controller.metricsPort).
	gs := grpc.NewServer(grpc.ChainUnaryInterceptor(csiserver.Logging(log), csiserver.Metrics(ctrlmetrics.Registry)))
	csi.RegisterIdentityServer(gs, &csiserver.Identity{Name: o.driver, Version: Version, Controller: true, Topology: true})
	csi.RegisterControllerServer(gs, ctrl)
	go func() { <-ctx.Done(); gs.GracefulStop() }()
	log.Info("controller_started", "endpoint", o.endpoint, "standalone", o.standalone != "", "mtls", o.mtlsDir != "", "version", Version)
	return gs.Serve(lis)
}
