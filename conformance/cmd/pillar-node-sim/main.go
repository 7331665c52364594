// Command pillar-node-sim is pillar-node with the loop connector
// (--connector=loop --sim-root DIR, conformance/simnode): a simulated
// agent's volumes attach as loop devices. Development, the conformance
// suites and the kind e2e run it; production runs pillar-node.
package main

import (
	"context"
	"io"

	"github.com/pillarhq/pillar/conformance/simnode"
	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/csinode"
)

func main() {
	cli.Run("pillar-node-sim", func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return csinode.Main(ctx, args, getenv, stderr, simnode.Node()...)
	})
}
