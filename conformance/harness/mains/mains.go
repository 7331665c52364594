// Package mains is the in-process runner's table: each binary's name and
// the Main its cmd/<bin>/main.go calls. It is a package of its own so only
// the suites that may run in-process link the products (a smaller test
// binary links faster for the others).
package mains

import (
	"context"
	"io"

	"github.com/pillarhq/pillar/conformance/harness/runner"
	"github.com/pillarhq/pillar/conformance/simnode"
	"github.com/pillarhq/pillar/impl/gateway/server"
	"github.com/pillarhq/pillar/impl/pillar/agent"
	"github.com/pillarhq/pillar/impl/pillar/controller"
	"github.com/pillarhq/pillar/impl/pillar/csinode"
	"github.com/pillarhq/pillar/sim/provider"
)

// Table maps a binary's name to its Main. One entry per binary; a binary
// missing here runs as a process under either runner. Each Main is called
// through a closure, so one that takes options (opts ...Option) fits too.
var Table = map[string]runner.MainFunc{
	"proxy": func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return server.Main(ctx, args, getenv, stderr)
	},
	"sim": func(ctx context.Context, args []string, _ func(string) string, stderr io.Writer) error {
		return provider.Main(ctx, args, stderr)
	},
	"pillar-agent": func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return agent.Main(ctx, args, getenv, stderr)
	},
	"pillar-controller": func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return controller.Main(ctx, args, getenv, stderr)
	},
	"pillar-node": func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return csinode.Main(ctx, args, getenv, stderr)
	},
	// The simulated-storage node (conformance/cmd): the product Main with
	// the simulators as options. pillar-agent-sim is not here: its tools
	// are links to an executable that acts as zfs, lvs, ... by name, which
	// a test binary cannot be, so it always runs as a process.
	"pillar-node-sim": func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return csinode.Main(ctx, args, getenv, stderr, simnode.Node()...)
	},
}
