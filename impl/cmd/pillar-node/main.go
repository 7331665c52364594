// Command pillar-node is the CSI Node plugin: it stages volumes exported
// by pillar agents over NVMe/TCP (nvme-cli). The variant that attaches a
// simulated agent's volumes as loop devices is pillar-node-sim
// (conformance/cmd/pillar-node-sim).
package main

import (
	"context"
	"io"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/csinode"
)

func main() {
	cli.Run("pillar-node", func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return csinode.Main(ctx, args, getenv, stderr)
	})
}
