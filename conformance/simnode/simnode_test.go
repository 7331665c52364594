package simnode

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/pillar/agent"
	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/csinode"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// bin-dir is accepted (and unused) so one `go test ./conformance/... -args
// -bin-dir=…` drives every package.
var _ = flag.String("bin-dir", "", "unused by these tests")

// Under a tool's name this test binary is that simulated tool, as
// pillar-agent-sim is: open's links point at it.
func TestMain(m *testing.M) {
	if code, ok := RunTool(os.Args); ok {
		os.Exit(code)
	}
	os.Exit(m.Run())
}

// --sim-root prepares the simulated node: pools the configuration names
// (with --sim-pool-size), tools linked to the executable, configfs kept
// in the directory; the runner reaches the simulation.
func TestAgentStorage(t *testing.T) {
	dir := t.TempDir()
	cfg := &agentconfig.Config{Backends: []agentconfig.Backend{{ZFS: &agentconfig.ZFS{Pool: "tank", ParentDataset: "k8s"}}}}
	s, err := open(dir, nvmet.DefaultRoot, "1G", "", cfg)
	if err != nil {
		t.Fatal(err)
	}
	if s.DeviceRoot != filepath.Join(dir, "state", "dev") || s.Target == nil {
		t.Fatalf("storage %+v", s)
	}
	out, err := s.Runner.Run(context.Background(), "zpool", "list", "-H", "-o", "name,health")
	if err != nil || string(out) != "tank\tONLINE\n" {
		t.Fatalf("zpool list: %q, %v", out, err)
	}
}

// The simulation's flags are checked with the agent's and node's own.
func TestFlagChecks(t *testing.T) {
	var u *cli.UsageError
	_, err := agent.ParseConfig([]string{"--sim-pool-size", "lots", "--log-level", "loud"}, io.Discard, Agent("")...)
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "--sim-pool-size") || !strings.Contains(err.Error(), "--log-level") {
		t.Fatalf("agent: %v", err)
	}
	_, err = csinode.ParseConfig([]string{"--connector", "loop"}, io.Discard, Node()...)
	if !errors.As(err, &u) || !strings.Contains(err.Error(), "--connector=loop needs --sim-root") || !strings.Contains(err.Error(), "--node-id is required") {
		t.Fatalf("node: %v", err)
	}
	if _, err := csinode.ParseConfig([]string{"--node-id", "n", "--connector", "loop", "--sim-root", t.TempDir()}, io.Discard, Node()...); err != nil {
		t.Fatalf("node with --sim-root: %v", err)
	}
}
