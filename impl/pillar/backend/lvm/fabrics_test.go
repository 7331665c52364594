package lvm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

type recordRunner struct{ got []string }

func (r *recordRunner) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	r.got = append(r.got, name+" "+strings.Join(args, " "))
	return nil, nil
}

// sysTree lays out /sys/block entries: a local PCIe namespace, a per-path
// TCP namespace and a multipath head whose subsystem has a TCP controller.
func sysTree(t *testing.T) string {
	root := t.TempDir()
	mk := func(rel, transport string) {
		d := filepath.Join(root, rel)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		if transport != "" {
			if err := os.WriteFile(filepath.Join(d, "transport"), []byte(transport+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	mk("block/nvme0n1/device", "pcie")
	mk("block/nvme1c1n1/device", "tcp")
	mk("block/nvme2n1/device/nvme2", "tcp") // head: device is the subsystem
	mk("block/vdb/device", "")
	return root
}

// LVM commands on a node that is also an NVMe-oF host never scan the
// fabric namespaces (a tenant's PV signature, I/O queued while a
// controller reconnects); local drives and other tools are untouched.
func TestFabricNamespacesAreFilteredFromLVM(t *testing.T) {
	rec := &recordRunner{}
	f := fabricsFilter{run: rec, sysfs: sysTree(t)}
	f.Run(context.Background(), "vgs", "vg0")
	f.Run(context.Background(), "blkdiscard", "-z", "/dev/vg0/a")
	want := `vgs --config devices { global_filter = [ "r|^/dev/nvme1c1n1$|", "r|^/dev/nvme2n1$|" ] } vg0`
	if rec.got[0] != want {
		t.Fatalf("got  %s\nwant %s", rec.got[0], want)
	}
	if rec.got[1] != "blkdiscard -z /dev/vg0/a" {
		t.Fatalf("non-LVM tool changed: %s", rec.got[1])
	}
	// Without fabric namespaces the command line is unchanged.
	rec.got = nil
	fabricsFilter{run: rec, sysfs: t.TempDir()}.Run(context.Background(), "lvs", "vg0")
	if rec.got[0] != "lvs vg0" {
		t.Fatalf("got %s", rec.got[0])
	}
}
