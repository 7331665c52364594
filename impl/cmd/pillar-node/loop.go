package main

// The loop connector is a simulator (sim/nvmeloop); only this command
// imports it, adapting it to the node's Connector interface.

import (
	"context"

	"github.com/pillarhq/pillar/impl/pillar/csinode"
	"github.com/pillarhq/pillar/sim/nvmeloop"
)

type loop struct{ l *nvmeloop.Loop }

func loopConnector(simRoot, nvmetRoot, stateDir string) csinode.Connector {
	return loop{nvmeloop.New(simRoot, nvmetRoot, stateDir)}
}

func (c loop) Connect(ctx context.Context, t csinode.Target) (string, error) {
	return c.l.Connect(ctx, t.NQN, t.HostNQN)
}
func (c loop) Disconnect(ctx context.Context, nqn string) error { return c.l.Disconnect(ctx, nqn) }
func (c loop) Rescan(ctx context.Context, nqn string) error     { return c.l.Rescan(ctx, nqn) }
