package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/go-logr/logr"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/pillarhq/pillar/impl/pillar/agentclient"
	"github.com/pillarhq/pillar/impl/pillar/csicontroller"
	"github.com/pillarhq/pillar/impl/pillar/kubecontroller"
)

// runManager runs the controller inside Kubernetes: reconcilers on the
// leader, webhooks and the CSI service on every replica.
func runManager(ctx context.Context, o options, agents *agentclient.Pool, log *slog.Logger) int {
	ctrl.SetLogger(logr.FromSlogHandler(log.Handler()))
	cfg, err := ctrl.GetConfig()
	if err != nil {
		fmt.Fprintf(os.Stderr, "pillar-controller: no Kubernetes configuration (use --standalone-stores outside a cluster): %v\n", err)
		return 1
	}
	mgr, err := kubecontroller.NewManager(cfg, kubecontroller.Options{
		Group: o.driver, AgentPort: o.agentPort, Agents: agents, Log: log,
		MetricsAddr: o.metricsAddr, ProbeAddr: o.probeAddr,
		LeaderElect: o.leaderElect, LeaderElectionNamespace: o.leaderNS,
		WebhookPort: o.webhookPort, WebhookCertDir: o.webhookCertDir,
		Serve: func(ctx context.Context, src kubecontroller.Source, ov kubecontroller.Overrides) error {
			return serveCSI(ctx, o, &csicontroller.Server{Stores: src, Agents: agents, Overrides: ov, Log: log}, log)
		},
	})
	if err != nil {
		log.Error("controller_failed", "error", err.Error())
		return 1
	}
	if err := mgr.Start(ctx); err != nil {
		log.Error("controller_failed", "error", err.Error())
		return 1
	}
	return 0
}
