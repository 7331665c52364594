// Command pillar-agent runs on storage nodes: it carves volumes out of the
// configured ZFS pools and LVM volume groups and exports them over NVMe/TCP
// through the kernel target, serving the agent gRPC API (plaintext, or
// mTLS with --mtls-cert-dir). The same agent on simulated storage is
// pillar-agent-sim (conformance/cmd/pillar-agent-sim).
package main

import (
	"context"
	"io"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/agent"
)

func main() {
	cli.Run("pillar-agent", func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return agent.Main(ctx, args, getenv, stderr)
	})
}
