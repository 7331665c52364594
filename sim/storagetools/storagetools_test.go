package storagetools

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
)

// step is one command and what the real tool prints for it. Outputs are
// compared exactly, except that a leading "~" asks only for a substring
// and "" for stdout means anything.
type step struct {
	cmd  string
	exit int
	out  string
	err  string
}

func newTestHost(t *testing.T, setup func(h *Host) error) *Host {
	t.Helper()
	h, err := Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if setup != nil {
		if err := setup(h); err != nil {
			t.Fatal(err)
		}
	}
	return h
}

func runSteps(t *testing.T, h *Host, steps []step) {
	t.Helper()
	for i, s := range steps {
		f := strings.Fields(s.cmd)
		var out, errb bytes.Buffer
		code := h.Run(f[0], f[1:], &out, &errb)
		if code != s.exit {
			t.Fatalf("step %d %q: exit %d, want %d\nstdout: %s\nstderr: %s", i, s.cmd, code, s.exit, out.String(), errb.String())
		}
		match(t, fmt.Sprintf("step %d %q stdout", i, s.cmd), out.String(), s.out, true)
		match(t, fmt.Sprintf("step %d %q stderr", i, s.cmd), errb.String(), s.err, false)
	}
}

func match(t *testing.T, what, got, want string, emptyIsAny bool) {
	t.Helper()
	switch {
	case want == "" && emptyIsAny:
	case strings.HasPrefix(want, "~"):
		if !strings.Contains(got, want[1:]) {
			t.Fatalf("%s = %q, want it to contain %q", what, got, want[1:])
		}
	case got != want:
		t.Fatalf("%s = %q, want %q", what, got, want)
	}
}

func withPool(h *Host) error { return h.CreatePool("tank", 1<<30) }

func withVG(h *Host) error {
	if err := h.CreateVolumeGroup("vg0", 1<<30, 4*mib); err != nil {
		return err
	}
	return h.CreateThinPool("vg0", "thin0", 256*mib)
}

func TestZFS(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		steps []step
	}{
		{"create, list, destroy", []step{
			{cmd: "zfs create -V 512M tank/v1"},
			// A thick zvol reserves its size plus room for indirect blocks.
			{cmd: "zfs list -Hp -o name,type,volsize,volblocksize,refreservation,referenced tank/v1", out: "tank/v1\tvolume\t536870912\t16384\t547356672\t0\n"},
			{cmd: "zfs list -o name,volsize,volblocksize,refreserv tank/v1", out: "NAME     VOLSIZE  VOLBLOCK  REFRESERV\ntank/v1  512M     16K       522M\n"},
			{cmd: "zfs destroy tank/v1"},
			{cmd: "zfs list tank/v1", exit: 1, err: "cannot open 'tank/v1': dataset does not exist\n"},
			{cmd: "zfs destroy tank/v1", exit: 1, err: "cannot open 'tank/v1': dataset does not exist\n"},
		}},
		{"create rounds up to volblocksize", []step{
			{cmd: "zfs create -s -V 1000000 -b 8K tank/v"},
			{cmd: "zfs list -Hp -o volsize,volblocksize,refreservation tank/v", out: "1007616\t8192\t0\n"},
			{cmd: "zfs create -V 100M -o volblocksize=64K -o compression=lz4 -o refreservation=none tank/w"},
			{cmd: "zfs list -Hp -o volblocksize,compression,refreservation tank/w", out: "65536\tlz4\t0\n"},
		}},
		{"create failures", []step{
			{cmd: "zfs create -V 1M tank/v"},
			{cmd: "zfs create -V 1M tank/v", exit: 1, err: "cannot create 'tank/v': dataset already exists\n"},
			{cmd: "zfs create -V 1M nopool/v", exit: 1, err: "cannot create 'nopool/v': no such pool 'nopool'\n"},
			{cmd: "zfs create -V 1M tank/a/v", exit: 1, err: "cannot create 'tank/a/v': parent does not exist\n"},
			{cmd: "zfs create -V 1M tank/v/x", exit: 1, err: "cannot create 'tank/v/x': parent is not a filesystem\n"},
			{cmd: "zfs create -V 2G tank/big", exit: 1, err: "cannot create 'tank/big': out of space\n"},
			{cmd: "zfs create -V 0 tank/zero", exit: 1, err: "cannot create 'tank/zero': volume size cannot be zero\n"},
			{cmd: "zfs create -V 1M -o foo=bar tank/p", exit: 1, err: "cannot create 'tank/p': invalid property 'foo'\n"},
			{cmd: "zfs create -V 1M -o volblocksize=3K tank/p", exit: 1, err: "cannot create 'tank/p': 'volblocksize' must be power of 2 from 512B to 16M\n"},
			{cmd: "zfs create -V 1M -o sync=sometimes tank/p", exit: 1, err: "cannot create 'tank/p': 'sync' must be one of 'standard | always | disabled'\n"},
			{cmd: "zfs create -V 1M -o volsize=2M tank/p", exit: 1, err: "~property 'volsize' specified multiple times"},
			{cmd: "zfs create -V 1x tank/p", exit: 1, err: "bad volume size '1x': invalid numeric suffix\n"},
			{cmd: "zfs create -o nokey tank/p", exit: 2, err: "missing '=' for property=value argument\n"},
			{cmd: "zfs create -V 1M", exit: 2, err: "~missing filesystem argument"},
			{cmd: "zfs create -s tank/fs", exit: 2, err: "'-s' and '-b' can only be used when creating a volume\n"},
			{cmd: "zfs list -Hp -o name -r tank", out: "tank\ntank/v\n"},
		}},
		{"sparse volumes may exceed the pool", []step{
			{cmd: "zfs create -s -V 10G tank/sparse"},
			{cmd: "zfs list -Hp -o name,used tank/sparse", out: "tank/sparse\t0\n"},
		}},
		{"parents and listing", []step{
			{cmd: "zfs create -p tank/k8s/vols"},
			{cmd: "zfs create -p tank/k8s/vols"},
			{cmd: "zfs create -V 16M tank/k8s/vols/b"},
			{cmd: "zfs create -V 16M tank/k8s/vols/a"},
			{cmd: "zfs create -V 16M tank/k8s/other"},
			{cmd: "zfs list -Hp -t volume -d 1 -o name,volsize tank/k8s/vols", out: "tank/k8s/vols/a\t16777216\ntank/k8s/vols/b\t16777216\n"},
			{cmd: "zfs list -H -o name,type", out: "tank\tfilesystem\ntank/k8s\tfilesystem\ntank/k8s/other\tvolume\ntank/k8s/vols\tfilesystem\ntank/k8s/vols/a\tvolume\ntank/k8s/vols/b\tvolume\n"},
			{cmd: "zfs list -Hp -o name,type tank/k8s", out: "tank/k8s\tfilesystem\n"},
			{cmd: "zfs list -t volume tank/k8s", err: "no datasets available\n"},
			{cmd: "zfs list -H -t volume tank/k8s", out: "", err: ""},
			{cmd: "zfs list -o name,bogus tank", exit: 2, err: "~bad property list: invalid property 'bogus'"},
			{cmd: "zfs list -t snapshots tank", exit: 2, err: "~invalid type 'snapshots'"},
			{cmd: "zfs destroy tank/k8s", exit: 1, err: "cannot destroy 'tank/k8s': filesystem has children\nuse '-r' to destroy the following datasets:\ntank/k8s/other\ntank/k8s/vols\ntank/k8s/vols/a\ntank/k8s/vols/b\n"},
			{cmd: "zfs destroy tank", exit: 1, err: "~cannot destroy 'tank': operation does not apply to pools"},
			{cmd: "zfs destroy -r tank/k8s"},
			{cmd: "zfs list -H -o name", out: "tank\n"},
		}},
		{"inherited properties", []step{
			{cmd: "zfs create -o compression=zstd -o org.example:team=storage tank/k8s"},
			{cmd: "zfs create -V 16M tank/k8s/v"},
			{cmd: "zfs list -H -o compression,org.example:team,volmode tank/k8s/v", out: "zstd\tstorage\tdefault\n"},
			{cmd: "zfs list -H -o volmode,volsize tank/k8s", out: "-\t-\n"},
		}},
		{"set volsize", []step{
			{cmd: "zfs create -V 64M tank/v"},
			{cmd: "zfs set volsize=100000 tank/v", exit: 1, err: "cannot set property for 'tank/v': 'volsize' must be a multiple of volume block size (16K)\n"},
			{cmd: "zfs set volsize=128M tank/v"},
			{cmd: "zfs list -Hp -o volsize,refreservation tank/v", out: "134217728\t138412032\n"},
			{cmd: "zfs set volsize=2G tank/v", exit: 1, err: "cannot set property for 'tank/v': out of space\n"},
			// ZFS itself lets a volume shrink; refusing that is the agent's job.
			{cmd: "zfs set volsize=32M tank/v"},
			{cmd: "zfs list -Hp -o volsize tank/v", out: "33554432\n"},
			{cmd: "zfs set volblocksize=8K tank/v", exit: 1, err: "cannot set property for 'tank/v': 'volblocksize' is readonly\n"},
			{cmd: "zfs set volsize=1G tank", exit: 1, err: "cannot set property for 'tank': 'volsize' does not apply to datasets of this type\n"},
			{cmd: "zfs set compression=lz4 tank/missing", exit: 1, err: "cannot open 'tank/missing': dataset does not exist\n"},
		}},
		// zfs destroy -d: a snapshot with clones is marked and goes with
		// its last clone; one without is destroyed at once.
		{"deferred snapshot destroy", []step{
			{cmd: "zfs create -V 16M tank/src"},
			{cmd: "zfs snapshot tank/src@s"},
			{cmd: "zfs snapshot tank/src@lone"},
			{cmd: "zfs clone tank/src@s tank/c1"},
			{cmd: "zfs clone tank/src@s tank/c2"},
			{cmd: "zfs destroy tank/src@s", exit: 1, err: "cannot destroy 'tank/src@s': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\ntank/c1\ntank/c2\n"},
			{cmd: "zfs destroy -d tank/src@s"},
			{cmd: "zfs destroy -d tank/src@s"},
			{cmd: "zfs list -H -t snapshot -o name,defer_destroy -r tank", out: "tank/src@lone\toff\ntank/src@s\ton\n"},
			{cmd: "zfs list -H -o name,defer_destroy tank/src", out: "tank/src\t-\n"},
			{cmd: "zfs destroy tank/src", exit: 1, err: "cannot destroy 'tank/src': volume has children\nuse '-r' to destroy the following datasets:\ntank/src@lone\ntank/src@s\n"},
			{cmd: "zfs destroy -d tank/src@lone"},
			{cmd: "zfs destroy tank/c1"},
			{cmd: "zfs list -H -t snapshot -o name -r tank", out: "tank/src@s\n"},
			{cmd: "zfs destroy tank/c2"},
			{cmd: "zfs list -H -o name tank/src@s", exit: 1, err: "cannot open 'tank/src@s': dataset does not exist\n"},
			{cmd: "zfs destroy -d tank/src@s", exit: 1, err: "could not find any snapshots to destroy; check snapshot names.\n"},
			{cmd: "zfs destroy -d tank/src", exit: 2, err: "~not simulated"},
			{cmd: "zfs destroy tank/src"},
		}},
		{"zpool list", []step{
			{cmd: "zpool list -Hp -o name,size,allocated,free,health tank", out: "tank\t1073741824\t0\t1073741824\tONLINE\n"},
			{cmd: "zpool list -Hp -o name,health tank other", exit: 1, out: "tank\tONLINE\n", err: "cannot open 'other': no such pool\n"},
			{cmd: "zpool list", out: "NAME  SIZE  ALLOC  FREE  CKPOINT  EXPANDSZ  FRAG  CAP  DEDUP  HEALTH  ALTROOT\ntank  1G    0B     1G    -        -         0%    0%   1.00x  ONLINE  -\n"},
			{cmd: "zpool status", exit: 2, err: "fakestorage: zpool status is not simulated\n"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, newTestHost(t, withPool), c.steps)
		})
	}
}

func TestZFSPoolFaults(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, withPool)
	runSteps(t, h, []step{{cmd: "zfs create -V 16M tank/v"}})
	if err := h.SetPoolHealth("tank", HealthSuspended); err != nil {
		t.Fatal(err)
	}
	runSteps(t, h, []step{
		{cmd: "zpool list -H -o name,health", out: "tank\tSUSPENDED\n"},
		{cmd: "zfs create -V 16M tank/w", exit: 1, err: "cannot create 'tank/w': pool I/O is currently suspended\n"},
		{cmd: "zfs list tank/v", exit: 1, err: "cannot open 'tank/v': pool I/O is currently suspended\n"},
	})
	if err := h.SetDevicesDenied(true); err != nil {
		t.Fatal(err)
	}
	runSteps(t, h, []step{
		{cmd: "zpool list tank", exit: 1, err: "Permission denied the ZFS utilities must be run as root.\n"},
		{cmd: "zfs list", exit: 1, err: "Permission denied the ZFS utilities must be run as root.\n"},
	})
}

func TestZvolBackingFile(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, withPool)
	runSteps(t, h, []step{{cmd: "zfs create -p tank/k8s"}, {cmd: "zfs create -V 64M tank/k8s/v"}})
	path := filepath.Join(h.DeviceRoot(), "zvol", "tank", "k8s", "v")
	fi, err := os.Stat(path)
	if err != nil || fi.Size() != 64*mib {
		t.Fatalf("backing file: %v, %v", fi, err)
	}
	if allocatedBytes(path) != 0 {
		t.Fatalf("a new backing file is not sparse: %d bytes allocated", allocatedBytes(path))
	}
	if err := os.WriteFile(path, bytes.Repeat([]byte{1}, 1<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	// WriteFile truncated the file: put the size back as a device keeps it.
	if err := os.Truncate(path, 64*mib); err != nil {
		t.Fatal(err)
	}
	runSteps(t, h, []step{
		{cmd: "zfs list -Hp -o referenced tank/k8s/v", out: "1048576\n"},
		{cmd: "zpool list -Hp -o allocated tank", out: "1048576\n"},
		{cmd: "zfs set volsize=128M tank/k8s/v"},
	})
	if fi, _ := os.Stat(path); fi.Size() != 128*mib {
		t.Fatalf("backing file after resize: %d bytes", fi.Size())
	}
	runSteps(t, h, []step{{cmd: "zfs destroy tank/k8s/v"}})
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("backing file after destroy: %v", err)
	}
}

func TestLVM(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name  string
		steps []step
	}{
		{"linear create, report, remove", []step{
			{cmd: "lvcreate -y -n lv1 -L 10m vg0", out: "  Rounding up size to full physical extent 12.00 MiB\n  Logical volume \"lv1\" created.\n"},
			{cmd: "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,pool_lv vg0/lv1",
				out: "  {\n      \"report\": [\n          {\n              \"lv\": [\n                  {\"lv_name\":\"lv1\", \"lv_size\":\"12582912\", \"lv_attr\":\"-wi-a-----\", \"pool_lv\":\"\"}\n              ]\n          }\n      ]\n  }\n"},
			{cmd: "lvs --units b -o lv_name,lv_size vg0/lv1", out: "  LV  LSize    \n  lv1 12582912B\n"},
			{cmd: "lvremove vg0/lv1", exit: 5, out: "  Do you really want to remove active logical volume vg0/lv1? [y/n]: [n]\n", err: "  Logical volume vg0/lv1 not removed.\n"},
			{cmd: "lvremove -y vg0/lv1", out: "  Logical volume \"lv1\" successfully removed.\n"},
			{cmd: "lvremove -y vg0/lv1", exit: 5, err: "  Failed to find logical volume \"vg0/lv1\"\n"},
			{cmd: "lvs vg0/lv1", exit: 5, err: "  Failed to find logical volume \"vg0/lv1\"\n"},
		}},
		{"vgs accounting", []step{
			// 256 extents; the thin pool takes 64 + 1 metadata + 1 spare.
			{cmd: "vgs --reportformat json --units b --nosuffix -o vg_name,vg_size,vg_free,vg_extent_size vg0",
				out: "  {\n      \"report\": [\n          {\n              \"vg\": [\n                  {\"vg_name\":\"vg0\", \"vg_size\":\"1073741824\", \"vg_free\":\"796917760\", \"vg_extent_size\":\"4194304\"}\n              ]\n          }\n      ]\n  }\n"},
			{cmd: "lvcreate -y -n lv1 -L 100m vg0", out: "~created"},
			{cmd: "vgs", out: "  VG  #PV #LV #SN Attr   VSize VFree  \n  vg0 1   2   0   wz--n- 1.00g 660.00m\n"},
			{cmd: "vgs -o vg_free_count,extent_count --noheadings vg0", out: "  165 256\n"},
			{cmd: "vgs nope", exit: 5, err: "  Volume group \"nope\" not found\n  Cannot process volume group nope\n"},
		}},
		{"tags", []step{
			{cmd: "lvcreate -y -n lv1 -L 4m --addtag owner --addtag pending vg0", out: "~created"},
			{cmd: "lvs --noheadings -o lv_name,lv_tags vg0/lv1", out: "  lv1 owner,pending\n"},
			{cmd: "lvchange --deltag pending vg0/lv1", out: "  Logical volume vg0/lv1 changed.\n"},
			{cmd: "lvs --noheadings -o lv_name,lv_tags vg0/lv1", out: "  lv1 owner\n"},
			{cmd: "lvchange --addtag bad,tag vg0/lv1", exit: 3, err: "  Invalid argument for --addtag: bad,tag\n"},
			{cmd: "lvchange --deltag x vg0/nope", exit: 5, err: "  Failed to find logical volume \"vg0/nope\"\n"},
		}},
		{"lvcreate failures", []step{
			{cmd: "lvcreate -n lv1 -L 4m vg0", out: "~created"},
			{cmd: "lvcreate -n lv1 -L 4m vg0", exit: 5, err: "  Logical Volume \"lv1\" already exists in volume group \"vg0\"\n"},
			{cmd: "lvcreate -n lv2 -L 4m vgx", exit: 5, err: "  Volume group \"vgx\" not found\n  Cannot process volume group vgx\n"},
			{cmd: "lvcreate -n lv2 -L 2g vg0", exit: 5, err: "  Volume group \"vg0\" has insufficient free space (189 extents): 512 required.\n"},
			{cmd: "lvcreate -n lv2 -L 1000b vg0", exit: 3, err: "  Size is not a multiple of 512. Try using 512 or 1024.\n  Invalid argument for --size: 1000b\n  Error during parsing of command line.\n"},
			{cmd: "lvcreate -n snapshot0 -L 4m vg0", exit: 3, err: "  Names starting \"snapshot\" are reserved. Please choose a different LV name.\n"},
			{cmd: "lvcreate -n a_tmeta -L 4m vg0", exit: 3, err: "  Names including \"_tmeta\" are reserved. Please choose a different LV name.\n"},
			{cmd: "lvcreate -n bad/name -L 4m vg0", exit: 3, err: "  Logical volume name \"bad/name\" is invalid.\n"},
			{cmd: "lvcreate -n lv3 vg0", exit: 3, err: "  Please specify either size or extents.\n"},
			{cmd: "lvcreate -n lv3 -L 4m", exit: 3, err: "  Please provide a volume group name\n"},
			{cmd: "lvcreate --bogus vg0", exit: 3, err: "lvcreate: unrecognized option '--bogus'\n\n  Error during parsing of command line.\n"},
			{cmd: "lvcreate -L 4m vg0", out: "  Logical volume \"lvol0\" created.\n"},
		}},
		{"thin volumes", []step{
			{cmd: "lvcreate -y -n t1 -V 128m --thinpool thin0 vg0", out: "  Logical volume \"t1\" created.\n"},
			{cmd: "lvcreate -y -n t2 -V 192m -T vg0/thin0", out: "~WARNING: You have not turned on protection", err: "  WARNING: Sum of all thin volume sizes (320.00 MiB) exceeds the size of thin pool vg0/thin0 (256.00 MiB).\n"},
			{cmd: "lvcreate -n t3 -V 4m --thinpool nope vg0", exit: 5, err: "  Pool nope not found in Volume group vg0.\n"},
			{cmd: "lvcreate -n l1 -L 4m vg0", out: "~created"},
			{cmd: "lvcreate -n t3 -V 4m --thinpool l1 vg0", exit: 5, err: "  Logical volume vg0/l1 is not a thin pool.\n"},
			{cmd: "lvs --units b --nosuffix -o lv_name,lv_attr,lv_size,pool_lv,data_percent vg0", out: "  LV    Attr       LSize     Pool  Data%\n  l1    -wi-a----- 4194304              \n  t1    Vwi-a-tz-- 134217728 thin0 0.00 \n  t2    Vwi-a-tz-- 201326592 thin0 0.00 \n  thin0 twi-aotz-- 268435456       0.00 \n"},
			{cmd: "lvremove thin0/x vg0/thin0", exit: 5, out: "  Removing pool vg0/thin0 will remove 2 dependent volume(s). Proceed? [y/n]: [n]\n", err: "  Volume group \"thin0\" not found\n  Cannot process volume group thin0\n  Logical volume vg0/thin0 not removed.\n"},
			{cmd: "lvremove -f vg0/thin0", out: "  Logical volume \"t1\" successfully removed.\n  Logical volume \"t2\" successfully removed.\n  Logical volume \"thin0\" successfully removed.\n"},
		}},
		{"lvextend", []step{
			{cmd: "lvcreate -y -n lv1 -L 8m vg0", out: "~created"},
			{cmd: "lvextend -L 16m vg0/lv1", out: "  Size of logical volume vg0/lv1 changed from 8.00 MiB (2 extents) to 16.00 MiB (4 extents).\n  Logical volume vg0/lv1 successfully resized.\n"},
			{cmd: "lvextend -L +4m /dev/vg0/lv1", out: "~to 20.00 MiB (5 extents)"},
			{cmd: "lvextend -L 4m vg0/lv1", exit: 5, err: "  New size given (1 extents) not larger than existing size (5 extents)\n"},
			{cmd: "lvextend -L 20m vg0/lv1", out: "  New size (5 extents) matches existing size (5 extents).\n"},
			{cmd: "lvextend -L -4m vg0/lv1", exit: 3, err: "  Negative argument not permitted - use lvreduce.\n"},
			{cmd: "lvextend -L 2g vg0/lv1", exit: 5, err: "  Insufficient free space: 507 extents needed, but only 185 available\n"},
			{cmd: "lvextend -L 8m vg0/nope", exit: 5, err: "  Failed to find logical volume \"vg0/nope\"\n"},
			{cmd: "lvextend vg0/lv1", exit: 3, err: "  Please specify either size or extents.\n"},
			{cmd: "lvcreate -y -n t1 -V 8m --thinpool thin0 vg0", out: "~created"},
			{cmd: "lvextend -L 1g vg0/t1", out: "~successfully resized", err: "~exceeds the size of thin pool vg0/thin0"},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			runSteps(t, newTestHost(t, withVG), c.steps)
		})
	}
}

func TestLVMDeniedDevices(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, withVG)
	if err := h.SetDevicesDenied(true); err != nil {
		t.Fatal(err)
	}
	runSteps(t, h, []step{
		{cmd: "vgs --reportformat json vg0", exit: 5, err: lvmDeniedMsg + "  Volume group \"vg0\" not found\n  Cannot process volume group vg0\n"},
		{cmd: "lvcreate -n x -L 4m vg0", exit: 5, err: "~Operation not permitted"},
	})
}

func TestThinDataPercent(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, withVG)
	runSteps(t, h, []step{{cmd: "lvcreate -n t1 -V 64m --thinpool thin0 vg0", out: "~created"}})
	path := filepath.Join(h.DeviceRoot(), "vg0", "t1")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{7}, 16<<20), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	runSteps(t, h, []step{
		{cmd: "lvs --noheadings -o data_percent vg0/t1", out: "  25.00\n"},
		{cmd: "lvs --noheadings -o data_percent vg0/thin0", out: "  6.25\n"},
	})
}

// Separate commands serialise on the state directory: of 8 concurrent
// creates that each need a third of the free space, exactly 2 succeed.
func TestConcurrentCommands(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, func(h *Host) error { return h.CreateVolumeGroup("vg0", 64*mib, 4*mib) })
	var wg sync.WaitGroup
	codes := make([]int, 8)
	for i := range codes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Another Host value on the same directory, as another process.
			other, err := Open(h.Dir())
			if err != nil {
				t.Error(err)
				return
			}
			var out, errb bytes.Buffer
			codes[i] = other.Run("lvcreate", []string{"-n", fmt.Sprintf("lv%d", i), "-L", "20m", "vg0"}, &out, &errb)
		}()
	}
	wg.Wait()
	ok := 0
	for _, c := range codes {
		if c == 0 {
			ok++
		} else if c != lvmFailed {
			t.Fatalf("exit codes %v", codes)
		}
	}
	if ok != 3 {
		t.Fatalf("%d creates succeeded (codes %v), want 3", ok, codes)
	}
}

func TestMainDispatch(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	env := func(k string) string {
		if k == StateEnv {
			return dir
		}
		return ""
	}
	run := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := Main(args, env, &out, &errb)
		return code, out.String(), errb.String()
	}
	steps := []struct {
		args []string
		code int
		out  string
	}{
		{[]string{"/opt/bin/fakestorage", "add-pool", "tank", "256M"}, 0, ""},
		{[]string{"fakestorage", "add-vg", "vg0", "128M", "4M"}, 0, ""},
		{[]string{"fakestorage", "add-thinpool", "vg0", "tp", "32M"}, 0, ""},
		{[]string{"fakestorage", "add-dataset", "tank/k8s"}, 0, ""},
		// The tool is picked by the name the binary runs under...
		{[]string{"/some/bin/zfs", "create", "-V", "16M", "tank/k8s/v"}, 0, ""},
		{[]string{"/some/bin/zfs", "list", "-H", "-o", "name", "-t", "volume"}, 0, "tank/k8s/v\n"},
		// ...or by the first argument.
		{[]string{"fakestorage", "zpool", "list", "-H", "-o", "name,health"}, 0, "tank\tONLINE\n"},
		{[]string{"fakestorage", "lvs", "--noheadings", "-o", "lv_name", "vg0"}, 0, "  tp\n"},
		{[]string{"fakestorage", "pool-health", "tank", "DEGRADED"}, 0, ""},
		{[]string{"zpool", "list", "-H", "-o", "health", "tank"}, 0, "DEGRADED\n"},
		{[]string{"fakestorage", "device-root"}, 0, filepath.Join(dir, "dev") + "\n"},
		{[]string{"fakestorage", "deny-devices", "on"}, 0, ""},
		{[]string{"vgs", "vg0"}, 5, ""},
		{[]string{"fakestorage", "deny-devices", "off"}, 0, ""},
		{[]string{"fakestorage", "remove-vg", "vg0"}, 0, ""},
		{[]string{"vgs", "vg0"}, 5, ""},
		{[]string{"fakestorage", "remove-pool", "tank"}, 0, ""},
		{[]string{"zpool", "list"}, 0, "no pools available\n"},
		{[]string{"fakestorage", "frobnicate"}, 1, ""},
		{[]string{"fakestorage"}, 2, ""},
	}
	for _, s := range steps {
		code, out, errOut := run(s.args...)
		if code != s.code || (s.out != "" && out != s.out) {
			t.Fatalf("%v: exit %d stdout %q stderr %q; want exit %d stdout %q", s.args, code, out, errOut, s.code, s.out)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "dev", "zvol", "tank")); !os.IsNotExist(err) {
		t.Fatalf("removed pool left devices: %v", err)
	}

	var errb bytes.Buffer
	if code := Main([]string{"zfs", "list"}, func(string) string { return "" }, &bytes.Buffer{}, &errb); code != 2 || !strings.Contains(errb.String(), StateEnv) {
		t.Fatalf("without a state directory: exit %d, %q", code, errb.String())
	}
	other := t.TempDir()
	if code := Main([]string{"fakestorage", "--state", other, "add-pool", "p2", "128M"}, func(string) string { return "" }, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("--state: exit %d, %q", code, errb.String())
	}
	if code := Main([]string{"fakestorage", "--state=" + other, "zpool", "list", "-H", "-o", "name"}, func(string) string { return "" }, &bytes.Buffer{}, &errb); code != 0 {
		t.Fatalf("--state=: exit %d, %q", code, errb.String())
	}

	links := filepath.Join(t.TempDir(), "bin")
	if code, _, e := run("fakestorage", "links", links); code != 0 {
		t.Fatalf("links: %s", e)
	}
	for _, tool := range Tools {
		if target, err := os.Readlink(filepath.Join(links, tool)); err != nil || target == "" {
			t.Fatalf("link %s: %q, %v", tool, target, err)
		}
	}
}

func TestSizes(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]int64{"1073741824": 1 << 30, "1G": 1 << 30, "1.5G": 3 << 29, "512M": 512 * mib, "4MiB": 4 * mib, "16k": 16 * kib, "100B": 100} {
		if got, err := ParseSize(in); err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "x", "-1G", "1Q"} {
		if _, err := ParseSize(bad); err == nil {
			t.Errorf("ParseSize(%q) succeeded", bad)
		}
	}
	for n, want := range map[int64]string{0: "0B", 512: "512B", 16 * kib: "16K", 1 << 30: "1G", 1092616192: "1.02G", 10239: "10.0K", 1536 * mib: "1.50G"} {
		if got := zfsNicenum(n); got != want {
			t.Errorf("zfsNicenum(%d) = %q, want %q", n, got, want)
		}
	}
	for _, c := range []struct {
		n     int64
		units byte
		want  string
	}{{1 << 30, 'h', "1.00g"}, {12 * mib, 'h', "12.00m"}, {1536*mib + 1, 'h', "1.50g"}, {2043 * mib, 'h', "<2.00g"}, {4 * mib, 'b', "4194304B"}, {4 * mib, 'm', "4.00m"}, {0, 'h', "0B"}} {
		if got := lvmReportSize(c.n, c.units, true); got != c.want {
			t.Errorf("lvmReportSize(%d, %c) = %q, want %q", c.n, c.units, got, c.want)
		}
	}
}

// A removed linear LV's data stays on its extents for the next linear LV
// (beyond the first 4 KiB lvcreate zeroes); blkdiscard -z zeroes it; a
// thin LV reads zeros.
func TestLVMFreedExtents(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, withVG)
	run := func(cmd ...string) {
		t.Helper()
		var out, errb strings.Builder
		if code := h.Run(cmd[0], cmd[1:], &out, &errb); code != 0 {
			t.Fatalf("%v: %d %s", cmd, code, errb.String())
		}
	}
	read := func(lv string, off int64) string {
		t.Helper()
		f, err := os.Open(h.lvPath("vg0", lv))
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 3)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	run("lvcreate", "-y", "-n", "old", "-L", "8m", "vg0")
	f, _ := os.OpenFile(h.lvPath("vg0", "old"), os.O_WRONLY, 0)
	f.WriteAt([]byte("abc"), 0)
	f.WriteAt([]byte("xyz"), 1<<20)
	f.Close()
	run("lvremove", "-y", "vg0/old")
	run("lvcreate", "-y", "-n", "new", "-L", "8m", "vg0")
	if got := read("new", 0); got != "\x00\x00\x00" {
		t.Fatalf("first 4 KiB: %q, want zeros", got)
	}
	if got := read("new", 1<<20); got != "xyz" {
		t.Fatalf("at 1 MiB: %q, want the removed LV's data", got)
	}
	run("blkdiscard", "-z", h.lvPath("vg0", "new"))
	if got := read("new", 1<<20); got != "\x00\x00\x00" {
		t.Fatalf("after blkdiscard -z: %q", got)
	}
}

// A report leaves state.json alone (the write is skipped, not just the
// same bytes written again), and a command that changes the host writes it.
func TestReportDoesNotRewriteState(t *testing.T) {
	t.Parallel()
	h := newTestHost(t, func(h *Host) error { return h.CreateVolumeGroup("vg0", 1<<30, 0) })
	inode := func() uint64 {
		t.Helper()
		fi, err := os.Stat(filepath.Join(h.Dir(), stateFile))
		if err != nil {
			t.Fatal(err)
		}
		return fi.Sys().(*syscall.Stat_t).Ino
	}
	before := inode()
	var out, errb bytes.Buffer
	if code := h.Run("vgs", []string{"vg0"}, &out, &errb); code != 0 {
		t.Fatalf("vgs exit %d: %s", code, errb.String())
	}
	if _, err := Open(h.Dir()); err != nil {
		t.Fatal(err)
	}
	if inode() != before {
		t.Fatal("vgs or Open rewrote state.json")
	}
	if code := h.Run("lvcreate", []string{"-y", "-n", "lv1", "-L", "4m", "vg0"}, &out, &errb); code != 0 {
		t.Fatalf("lvcreate exit %d: %s", code, errb.String())
	}
	if inode() == before {
		t.Fatal("lvcreate did not write state.json")
	}
}
