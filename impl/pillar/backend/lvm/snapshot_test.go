package lvm

import (
	"context"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// The thin snapshot command lines and lv_time parsing match the real
// tools: a snapshot keeps LVM's activation skip, a restored volume is
// created active and grown to the request.
func TestSnapshotCommands(t *testing.T) {
	t.Parallel()
	const lvsSrc = "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,pool_lv,lv_tags vg0/pvc-src"
	const lvsSnapTime = "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,pool_lv,lv_tags,lv_time vg0/snap-1"
	const lvsNew = "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,pool_lv,lv_tags vg0/pvc-new"
	snapRow := lvsOut(`                  {"lv_name":"snap-1", "lv_size":"67108864", "lv_attr":"Vwi---tz-k", "pool_lv":"thin0", "lv_tags":"pillar-csi,pillar-csi-snapshot,pillar-csi-source:pvc-src", "lv_time":"2026-11-25 06:00:00 +0000"}`)
	b := newScripted(t, Config{ThinPool: "thin0", ProvisioningMode: "thin"},
		call{Cmd: lvsSnapTime, Stderr: "  Failed to find logical volume \"vg0/snap-1\"\n", Exit: 5},
		call{Cmd: lvsSrc, Stdout: lvsOut(`                  {"lv_name":"pvc-src", "lv_size":"67108864", "lv_attr":"Vwi-a-tz--", "pool_lv":"thin0", "lv_tags":"pillar-csi"}`)},
		call{Cmd: "lvcreate -y -s -n snap-1 --addtag pillar-csi --addtag pillar-csi-snapshot --addtag pillar-csi-source:pvc-src vg0/pvc-src", Stdout: "  Logical volume \"snap-1\" created.\n"},
		call{Cmd: lvsSnapTime, Stdout: snapRow},
		// Restore into 100 MiB: 25 extents, active, then extended.
		call{Cmd: lvsSnapTime, Stdout: snapRow},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: lvsNew, Stderr: "  Failed to find logical volume \"vg0/pvc-new\"\n", Exit: 5},
		call{Cmd: "lvcreate -y -s --setactivationskip n -n pvc-new --addtag pillar-csi --addtag pillar-csi-content:snapshot:snap-1 vg0/snap-1", Stdout: "  Logical volume \"pvc-new\" created.\n"},
		call{Cmd: lvsNew, Stdout: lvsOut(`                  {"lv_name":"pvc-new", "lv_size":"67108864", "lv_attr":"Vwi-a-tz--", "pool_lv":"thin0", "lv_tags":"pillar-csi,pillar-csi-content:snapshot:snap-1"}`)},
		call{Cmd: "lvextend -L 104857600b vg0/pvc-new", Stdout: "  Logical volume vg0/pvc-new successfully resized.\n"},
		call{Cmd: lvsNew, Stdout: lvsOut(`                  {"lv_name":"pvc-new", "lv_size":"104857600", "lv_attr":"Vwi-a-tz--", "pool_lv":"thin0", "lv_tags":"pillar-csi,pillar-csi-content:snapshot:snap-1"}`)},
	)
	s, err := b.CreateSnapshot(context.Background(), "snap-1", "pvc-src")
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Snapshot{Name: "snap-1", SourceVolume: "pvc-src", SizeBytes: 64 << 20, CreatedAt: time.Date(2026, 11, 25, 6, 0, 0, 0, time.UTC), Native: "vg0/snap-1"}
	if s != want {
		t.Fatalf("snapshot %+v, want %+v", s, want)
	}
	v, err := b.CreateVolumeFrom(context.Background(), "pvc-new", 100<<20, backend.Source{Snapshot: "snap-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if v.SizeBytes != 100<<20 || v.Mode != backend.ModeThin || v.DevicePath != "/dev/vg0/pvc-new" {
		t.Fatalf("volume %+v", v)
	}
}
