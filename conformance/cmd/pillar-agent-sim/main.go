// Command pillar-agent-sim is pillar-agent with simulated storage behind
// --sim-root (conformance/simnode); started under a storage tool's name
// (the links --sim-root makes) it is that simulated tool. Development,
// the conformance suites and the kind e2e run it; production runs
// pillar-agent, which carries no simulator.
package main

import (
	"context"
	"io"
	"os"

	"github.com/pillarhq/pillar/conformance/simnode"
	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/agent"
)

func main() {
	if code, ok := simnode.RunTool(os.Args); ok {
		os.Exit(code)
	}
	cli.Run("pillar-agent-sim", func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		return agent.Main(ctx, args, getenv, stderr, simnode.Agent("")...)
	})
}
