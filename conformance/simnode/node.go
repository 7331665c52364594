package simnode

import (
	"context"
	"errors"
	"flag"

	"github.com/pillarhq/pillar/impl/pillar/csinode"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
	"github.com/pillarhq/pillar/sim/nvmeloop"
)

// Node adds --connector=loop and its --sim-root DIR to csinode.Main: the
// volumes of an agent running with --sim-root DIR attach as loop devices
// (after the checks a real target makes), so real mkfs, mount and resize
// run on a machine without NVMe/TCP.
func Node() []csinode.Option {
	var root string
	flags := csinode.WithFlags(func(fs *flag.FlagSet) func(*csinode.Config) error {
		fs.StringVar(&root, "sim-root", "", "with --connector=loop: the simulated agent's --sim-root")
		return func(c *csinode.Config) error {
			if c.Connector == "loop" && root == "" {
				return errors.New("--connector=loop needs --sim-root")
			}
			return nil
		}
	})
	conn := csinode.WithConnector("loop", "volumes of a simulated agent as loop devices", func(c *csinode.Config) (csinode.Connector, error) {
		return loop{nvmeloop.New(root, nvmet.DefaultRoot, c.StateDir)}, nil
	})
	return []csinode.Option{flags, conn}
}

// loop adapts the simulator to the node's Connector.
type loop struct{ l *nvmeloop.Loop }

func (c loop) Connect(ctx context.Context, t csinode.Target) (string, error) {
	return c.l.Connect(ctx, t.NQN, t.HostNQN)
}
func (c loop) Connected(ctx context.Context, nqn string) (bool, error) {
	return c.l.Connected(ctx, nqn)
}
func (c loop) Disconnect(ctx context.Context, nqn string) error { return c.l.Disconnect(ctx, nqn) }
func (c loop) Rescan(ctx context.Context, nqn string) error     { return c.l.Rescan(ctx, nqn) }
