// Command pillar-controller is the CSI controller. With --standalone-stores
// it runs outside Kubernetes on a static stores file (development, tests,
// csi-sanity); otherwise it runs the controller-runtime manager.
package main

import (
	"context"
	"io"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/controller"
)

func main() {
	cli.Run("pillar-controller", func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return controller.Main(ctx, args, getenv, stderr)
	})
}
