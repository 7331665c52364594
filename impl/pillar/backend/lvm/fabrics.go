package lvm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// A storage node can also be an NVMe-oF host (a hyperconverged node whose
// pods use volumes exported by the node itself or by another node). LVM
// scans every block device at each command, so without a filter it would:
//   - read a tenant's volume through its NVMe/TCP namespace and adopt any
//     PV signature the tenant wrote there, and
//   - block every lvs/vgs for as long as a namespace's controller is
//     reconnecting (I/O on a path-less namespace is queued up to
//     ctrl-loss-tmo), so a restarted agent hangs in discovery after a
//     storage node reboot, exactly when its hosts need it.
//
// fabricsFilter therefore adds a global_filter rejecting every namespace
// reached over a fabric (tcp, rdma, fc, loop) to each LVM command. Local
// PCIe NVMe drives stay visible. The filter is recomputed per command:
// namespaces come and go with connects.
type fabricsFilter struct {
	run   backend.Runner
	sysfs string // "/sys"
}

var lvmCommands = map[string]bool{"lvs": true, "vgs": true, "pvs": true, "lvcreate": true, "lvchange": true, "lvremove": true, "lvextend": true, "lvresize": true, "vgchange": true}

func (f fabricsFilter) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if lvmCommands[name] {
		if devs := fabricNamespaces(f.sysfs); len(devs) > 0 {
			args = append([]string{"--config", filterConfig(devs)}, args...)
		}
	}
	return f.run.Run(ctx, name, args...)
}

// filterConfig rejects the given /sys/block names by their /dev path.
// Paths matching no pattern (a by-id link of the same device) do not
// change the decision, so one pattern per kernel name is enough.
func filterConfig(devs []string) string {
	pats := make([]string, len(devs))
	for i, d := range devs {
		pats[i] = fmt.Sprintf(`"r|^/dev/%s$|"`, d)
	}
	return "devices { global_filter = [ " + strings.Join(pats, ", ") + " ] }"
}

var fabricTransports = map[string]bool{"tcp": true, "rdma": true, "fc": true, "loop": true}

// fabricNamespaces lists the block devices (/sys/block/nvme*) served by a
// fabrics controller: a per-path namespace's device is its controller; a
// multipath head's device is the subsystem, whose controllers are its
// children.
func fabricNamespaces(sysfs string) []string {
	blocks, _ := filepath.Glob(filepath.Join(sysfs, "block", "nvme*"))
	var out []string
	for _, b := range blocks {
		dev := filepath.Join(b, "device")
		transports := []string{readTrim(filepath.Join(dev, "transport"))}
		ctrls, _ := filepath.Glob(filepath.Join(dev, "nvme*", "transport"))
		for _, c := range ctrls {
			transports = append(transports, readTrim(c))
		}
		for _, t := range transports {
			if fabricTransports[t] {
				out = append(out, filepath.Base(b))
				break
			}
		}
	}
	sort.Strings(out)
	return out
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
