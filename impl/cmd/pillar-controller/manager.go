package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"

	"github.com/pillarhq/pillar/impl/pillar/agentclient"
)

// runManager runs the controller inside Kubernetes.
func runManager(ctx context.Context, o options, agents *agentclient.Pool, log *slog.Logger) int {
	fmt.Fprintln(os.Stderr, "pillar-controller: the Kubernetes manager is not built yet (issue 8); run with --standalone-stores FILE")
	return 2
}
