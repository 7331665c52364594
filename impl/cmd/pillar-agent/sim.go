package main

// The simulated storage node behind --sim-root. It lives in the command,
// not in impl/pillar: the agent's packages never import the simulators;
// only this binary carries them, so an image can run the agent without a
// storage node (docs/decisions.md).

import (
	"os"
	"path/filepath"

	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
	"github.com/pillarhq/pillar/sim/configfs"
	"github.com/pillarhq/pillar/sim/storagetools"
)

type simNode struct {
	runner     backend.Runner
	deviceRoot string
	configfs   nvmet.FS
}

// runAsTool runs the binary as a simulated storage tool when invoked
// under a tool's name.
func runAsTool(args []string) (int, bool) {
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

// openSim prepares DIR: state/ (the simulated pools and volume groups,
// volumes as sparse files under state/dev), bin/ (the tools, links to this
// binary) and configfs.json (the target's tree, kept across restarts as
// the kernel keeps it).
func openSim(dir, nvmetRoot, poolSize string, cfg *agentconfig.Config) (*simNode, error) {
	dir = absPath(dir)
	host, err := storagetools.Open(filepath.Join(dir, "state"))
	if err != nil {
		return nil, err
	}
	if poolSize != "" {
		size, err := storagetools.ParseSize(poolSize)
		if err != nil {
			return nil, err
		}
		for _, b := range cfg.Backends {
			switch {
			case b.ZFS != nil:
				err = host.EnsurePool(b.ZFS.Pool, b.ZFS.ParentDataset, size)
			case b.LVM != nil:
				err = host.EnsureVolumeGroup(b.LVM.VolumeGroup, b.LVM.ThinPool, size)
			}
			if err != nil {
				return nil, err
			}
		}
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	for _, t := range storagetools.Tools {
		link := filepath.Join(bin, t)
		if cur, err := os.Readlink(link); err == nil && cur == self {
			continue
		}
		os.Remove(link)
		if err := os.Symlink(self, link); err != nil {
			return nil, err
		}
	}
	cfs, err := configfs.Open(nvmetRoot, filepath.Join(dir, "configfs.json"))
	if err != nil {
		return nil, err
	}
	cfs.DeviceExists = func(p string) bool { _, err := os.Stat(p); return err == nil }
	return &simNode{
		runner:     &backend.ExecRunner{Dir: bin, Env: []string{storagetools.StateEnv + "=" + host.Dir()}},
		deviceRoot: host.DeviceRoot(),
		configfs:   cfs,
	}, nil
}
