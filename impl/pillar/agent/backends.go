package agent

import (
	"github.com/pillarhq/pillar/impl/pillar/agentconfig"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/lvm"
	"github.com/pillarhq/pillar/impl/pillar/backend/zfs"
)

// Backends builds the configured backends over one runner; deviceRoot
// stands for /dev ("" is /dev).
func Backends(cfg *agentconfig.Config, run backend.Runner, deviceRoot string) (backend.Set, error) {
	var bs []backend.Backend
	for _, b := range cfg.Backends {
		switch {
		case b.ZFS != nil:
			bs = append(bs, zfs.New(zfs.Config{Pool: b.ZFS.Pool, ParentDataset: b.ZFS.ParentDataset, DeviceRoot: deviceRoot}, run))
		case b.LVM != nil:
			bs = append(bs, lvm.New(lvm.Config{VolumeGroup: b.LVM.VolumeGroup, ThinPool: b.LVM.ThinPool, ProvisioningMode: b.LVM.ProvisioningMode, DeviceRoot: deviceRoot, OverprovisionRatio: b.LVM.OverprovisionRatio}, run))
		}
	}
	return backend.NewSet(bs...)
}
