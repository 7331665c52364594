// Package simnode puts pillar-agent and pillar-node on a simulated
// storage node: the storage tools of sim/storagetools, the configfs of
// sim/configfs and the loop connector of sim/nvmeloop, handed to the
// product's Main as options. The product packages never import the
// simulators; pillar-agent-sim and pillar-node-sim (conformance/cmd) are
// these options over agent.Main and csinode.Main, the binaries the
// conformance suites and the kind e2e run.
package simnode

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/pillarhq/pillar/impl/pillar/agent"
	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/sim/configfs"
	"github.com/pillarhq/pillar/sim/storagetools"
)

// RunTool runs the process as a simulated storage tool when it was
// started under a tool's name (the links under --sim-root's bin/).
func RunTool(args []string) (code int, ok bool) {
	if len(args) == 0 {
		return 0, false
	}
	name := filepath.Base(args[0])
	for _, t := range storagetools.Tools {
		if t == name {
			return storagetools.Main(args, os.Getenv, os.Stdout, os.Stderr), true
		}
	}
	return 0, false
}

// Agent adds --sim-root DIR and --sim-pool-size to agent.Main: with
// --sim-root the agent runs on simulated storage kept in DIR; without it,
// on the node's own. tools is the executable that acts as the storage
// tools (DIR/bin links to it): empty means this process's own, whose main
// must then call RunTool first (pillar-agent-sim does); bin/fakestorage
// is another such executable.
func Agent(tools string) []agent.Option {
	var root, poolSize string
	flags := agent.WithFlags(func(fs *flag.FlagSet) func(*agent.Config) error {
		fs.StringVar(&root, "sim-root", "", "run on simulated storage tools and configfs kept in this directory (development and tests)")
		fs.StringVar(&poolSize, "sim-pool-size", "", "with --sim-root: create configured pools and volume groups missing from the simulation with this size (e.g. 10G)")
		return func(*agent.Config) error {
			if poolSize == "" {
				return nil
			}
			if _, err := storagetools.ParseSize(poolSize); err != nil {
				return fmt.Errorf("--sim-pool-size: %w", err)
			}
			return nil
		}
	})
	storage := agent.WithStorage(func(c *agent.Config, cfg *agentconfig.Config, log *slog.Logger) (agent.Storage, error) {
		if root == "" {
			return agent.Storage{}, nil
		}
		s, err := open(root, c.NvmetRoot, poolSize, tools, cfg)
		if err != nil {
			return s, fmt.Errorf("--sim-root: %w", err)
		}
		log.Info("simulated_storage", "root", root, "device_root", s.DeviceRoot)
		return s, nil
	})
	return []agent.Option{flags, storage}
}

// open prepares dir: state/ (the simulated pools and volume groups,
// volumes as sparse files under state/dev), bin/ (the tools, links to
// the tools executable), configfs.json (the target's tree, kept
// across restarts as the kernel keeps it) and agent/ (the agent's
// --state-dir on this node's disk, so agents on simulated nodes never
// share one).
func open(dir, nvmetRoot, poolSize, tools string, cfg *agentconfig.Config) (agent.Storage, error) {
	if a, err := filepath.Abs(dir); err == nil {
		dir = a
	}
	host, err := storagetools.Open(filepath.Join(dir, "state"))
	if err != nil {
		return agent.Storage{}, err
	}
	if poolSize != "" {
		size, err := storagetools.ParseSize(poolSize)
		if err != nil {
			return agent.Storage{}, err
		}
		for _, b := range cfg.Backends {
			switch {
			case b.ZFS != nil:
				err = host.EnsurePool(b.ZFS.Pool, b.ZFS.ParentDataset, size)
			case b.LVM != nil:
				err = host.EnsureVolumeGroup(b.LVM.VolumeGroup, b.LVM.ThinPool, size)
			}
			if err != nil {
				return agent.Storage{}, err
			}
		}
	}
	if tools == "" {
		if tools, err = os.Executable(); err != nil {
			return agent.Storage{}, err
		}
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return agent.Storage{}, err
	}
	for _, t := range storagetools.Tools {
		link := filepath.Join(bin, t)
		if cur, err := os.Readlink(link); err == nil && cur == tools {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(tools, link); err != nil {
			return agent.Storage{}, err
		}
	}
	cfs, err := configfs.Open(nvmetRoot, filepath.Join(dir, "configfs.json"))
	if err != nil {
		return agent.Storage{}, err
	}
	cfs.DeviceExists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	return agent.Storage{
		Runner:     &backend.ExecRunner{Dir: bin, Env: []string{storagetools.StateEnv + "=" + host.Dir()}},
		DeviceRoot: host.DeviceRoot(),
		Target:     cfs,
		StateDir:   filepath.Join(dir, "agent"),
	}, nil
}
