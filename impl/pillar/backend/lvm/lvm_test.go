package lvm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/backendtest"
)

type call = backendtest.Call

const (
	vgsCmd  = "vgs --reportformat json --units b --nosuffix -o vg_name,vg_size,vg_free,vg_extent_size vg0"
	lvsPVC  = "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,pool_lv,lv_tags vg0/pvc-1"
	lvsPool = "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,data_percent,metadata_percent vg0/thin0"
	// A vgs report as LVM prints it; sizes carry the B suffix here to check
	// the parser does not depend on --nosuffix.
	vgsOut = `  {
      "report": [
          {
              "vg": [
                  {"vg_name":"vg0", "vg_size":"10733223936B", "vg_free":"5364514816B", "vg_extent_size":"4194304B"}
              ]
          }
      ]
  }
`
	notFound = "  Failed to find logical volume \"vg0/pvc-1\"\n"
	exists   = "  Logical Volume \"pvc-1\" already exists in volume group \"vg0\"\n"
	lvcreate = "lvcreate -y -n pvc-1 -L 4194304b --addtag pillar-csi --addtag pillar-csi-unwiped vg0"
)

func lvsOut(rows string) string {
	return "  {\n      \"report\": [\n          {\n              \"lv\": [\n" + rows + "\n              ]\n          }\n      ]\n  }\n"
}

func newScripted(t *testing.T, cfg Config, calls ...call) *Backend {
	cfg.VolumeGroup = "vg0"
	return New(cfg, backendtest.NewScript(t, calls...))
}

// The command lines and output parsing match the real LVM tools.
func TestCreateLinearCommands(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		// 1 GiB + 1 byte is rounded up to whole 4 MiB extents before lvcreate
		// sees it (and -L in bytes must be a multiple of 512).
		// A clean success is what was asked for: no read-back.
		call{Cmd: "lvcreate -y -n pvc-1 -L 1077936128b --addtag pillar-csi --addtag pillar-csi-unwiped vg0", Stdout: "  Logical volume \"pvc-1\" created.\n"},
		// A linear LV is zeroed whole before it is handed out, then marked so.
		call{Cmd: "blkdiscard -z /dev/vg0/pvc-1"},
		call{Cmd: "lvchange --deltag pillar-csi-unwiped vg0/pvc-1", Stdout: "  Logical volume vg0/pvc-1 changed.\n"},
	)
	v, err := b.CreateVolume(context.Background(), "pvc-1", 1<<30+1, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Volume{Name: "pvc-1", SizeBytes: 1077936128, DevicePath: "/dev/vg0/pvc-1", Mode: "linear", Native: "vg0/pvc-1"}
	if v != want {
		t.Fatalf("volume %+v, want %+v", v, want)
	}
}

func TestCreateThinCommands(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0"},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: "lvcreate -y -n pvc-1 -V 4194304b --thinpool thin0 --addtag pillar-csi vg0", Stdout: "  Logical volume \"pvc-1\" created.\n"},
	)
	v, err := b.CreateVolume(context.Background(), "pvc-1", 1, map[string]string{ParamProvisioningMode: "thin"})
	if err != nil || v.Mode != "thin" || v.SizeBytes != 4194304 {
		t.Fatalf("create = %+v, %v", v, err)
	}
}

func TestCreateExistingOtherModeIsAlreadyExists(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0"},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: "lvcreate -y -n pvc-1 -L 4194304b --addtag pillar-csi --addtag pillar-csi-unwiped vg0", Stderr: exists, Exit: 5},
		call{Cmd: lvsPVC, Stdout: lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"4194304", "lv_attr":"Vwi-a-tz--", "pool_lv":"thin0", "lv_tags":"pillar-csi"}`)},
	)
	_, err := b.CreateVolume(context.Background(), "pvc-1", 4194304, nil)
	if !errors.Is(err, backend.ErrAlreadyExists) {
		t.Fatalf("linear create over a thin volume: %v", err)
	}
}

func TestModes(t *testing.T) {
	t.Parallel()
	linearOnly := New(Config{VolumeGroup: "vg0"}, nil)
	for _, params := range []map[string]string{
		{ParamProvisioningMode: "thin"},  // no thin pool configured
		{ParamProvisioningMode: "thick"}, // not a mode
		{"stripes": "2"},                 // not a parameter
	} {
		if _, err := linearOnly.CreateVolume(context.Background(), "pvc-1", 1, params); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("params %v: %v", params, err)
		}
	}
	for _, name := range []string{"snapshot1", "pvmove0", "x_tdata", "a_pmspare"} {
		if _, err := linearOnly.CreateVolume(context.Background(), name, 1, nil); !errors.Is(err, backend.ErrInvalid) {
			t.Errorf("reserved name %q: %v", name, err)
		}
	}
}

func TestDeleteRefusesThinPool(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0"},
		call{Cmd: "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,lv_attr,pool_lv,lv_tags vg0/thin0",
			Stdout: lvsOut(`                  {"lv_name":"thin0", "lv_size":"536870912", "lv_attr":"twi-aotz--", "pool_lv":""}`)},
	)
	if err := b.DeleteVolume(context.Background(), "thin0"); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("delete of the thin pool: %v", err)
	}
}

func TestDeleteCommands(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{},
		call{Cmd: lvsPVC, Stdout: lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"4194304", "lv_attr":"-wi-ao----", "pool_lv":"", "lv_tags":"pillar-csi"}`)},
		call{Cmd: "lvremove -y vg0/pvc-1", Stderr: "  Logical volume vg0/pvc-1 in use.\n", Exit: 5},
	)
	if err := b.DeleteVolume(context.Background(), "pvc-1"); !errors.Is(err, backend.ErrInUse) {
		t.Fatalf("delete of an open volume: %v", err)
	}
}

// A create interrupted after lvcreate (the LV still tagged unwiped) is
// finished by the retry: zeroed, then marked.
func TestCreateRetryFinishesZeroing(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: lvcreate, Stderr: exists, Exit: 5},
		call{Cmd: lvsPVC, Stdout: lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"4194304", "lv_attr":"-wi-a-----", "pool_lv":"", "lv_tags":"pillar-csi,pillar-csi-unwiped"}`)},
		call{Cmd: "blkdiscard -z /dev/vg0/pvc-1"},
		call{Cmd: "lvchange --deltag pillar-csi-unwiped vg0/pvc-1"},
	)
	if _, err := b.CreateVolume(context.Background(), "pvc-1", 4194304, nil); err != nil {
		t.Fatal(err)
	}
}

// An LV without the pillar-csi tag is someone else's: create over it is
// refused, deletion refused, and it is invisible to Get.
func TestForeignLVIsLeftAlone(t *testing.T) {
	t.Parallel()
	foreign := lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"4194304", "lv_attr":"-wi-a-----", "pool_lv":"", "lv_tags":""}`)
	b := newScripted(t, Config{},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: lvcreate, Stderr: exists, Exit: 5},
		call{Cmd: lvsPVC, Stdout: foreign},
		call{Cmd: lvsPVC, Stdout: foreign},
		call{Cmd: lvsPVC, Stdout: foreign},
	)
	if _, err := b.CreateVolume(context.Background(), "pvc-1", 4194304, nil); !errors.Is(err, backend.ErrNotOwned) {
		t.Errorf("create over a foreign LV: %v", err)
	}
	if err := b.DeleteVolume(context.Background(), "pvc-1"); !errors.Is(err, backend.ErrNotOwned) {
		t.Errorf("delete of a foreign LV: %v", err)
	}
	if _, err := b.GetVolume(context.Background(), "pvc-1"); !errors.Is(backend.Classify(err), backend.ErrNotFound) {
		t.Errorf("get of a foreign LV: %v", err)
	}
}

// A thin pool's free data space, and its metadata usage (watched on its
// own: a full metadata area stops writes with data space left).
func TestThinCapacity(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0", ProvisioningMode: "thin"},
		call{Cmd: lvsPool, Stdout: lvsOut(`                  {"lv_name":"thin0", "lv_size":"1073741824", "lv_attr":"twi-aotz--", "data_percent":"25.00", "metadata_percent":"87.50"}`)},
	)
	c, err := b.Capacity(context.Background(), nil)
	if err != nil || c != (backend.Capacity{TotalBytes: 1 << 30, FreeBytes: 3 << 28, ThinPool: true, ThinMetadataUsed: 0.875}) {
		t.Fatalf("Capacity = %+v, %v", c, err)
	}
}

// With an overprovision ratio, a thin pool's capacity is a budget of
// virtual sizes: 1 GiB × 2.5 less the 1.5 GiB promised to the pool's two
// thin volumes (a linear LV and another pool's volume do not count), even
// though only a quarter of the data space is written.
func TestThinCapacityOverprovisioned(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0", ProvisioningMode: "thin", OverprovisionRatio: 2.5},
		call{Cmd: lvsPool, Stdout: lvsOut(`                  {"lv_name":"thin0", "lv_size":"1073741824", "lv_attr":"twi-aotz--", "data_percent":"25.00", "metadata_percent":"10.00"}`)},
		call{Cmd: "lvs --reportformat json --units b --nosuffix -o lv_name,lv_size,pool_lv vg0", Stdout: lvsOut(`                  {"lv_name":"thin0", "lv_size":"1073741824", "pool_lv":""},
                  {"lv_name":"pvc-a", "lv_size":"1073741824", "pool_lv":"thin0"},
                  {"lv_name":"pvc-b", "lv_size":"536870912", "pool_lv":"thin0"},
                  {"lv_name":"linear", "lv_size":"4294967296", "pool_lv":""},
                  {"lv_name":"other", "lv_size":"4294967296", "pool_lv":"thin1"}`)},
	)
	c, err := b.Capacity(context.Background(), nil)
	want := backend.Capacity{TotalBytes: 5 << 29, FreeBytes: 5<<29 - 3<<29, ThinPool: true, ThinMetadataUsed: 0.1}
	if err != nil || c != want {
		t.Fatalf("Capacity = %+v, %v; want %+v", c, err, want)
	}
}

func TestDiscoverNotAThinPool(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0"},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: lvsPool, Stdout: lvsOut(`                  {"lv_name":"thin0", "lv_size":"1073741824", "lv_attr":"-wi-a-----", "data_percent":""}`)},
	)
	p := b.Discover(context.Background())
	if p.Discovered || p.Healthy || p.Layout.ThinPool != "thin0" || p.Reason == "" {
		t.Fatalf("Discover = %+v", p)
	}
}

// The real tools' failure messages map to the errors the API edge needs.
func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stderr string
		exit   int
		want   error
	}{
		{"  Volume group \"vg0\" has insufficient free space (10 extents): 256 required.\n", 5, backend.ErrResourceExhausted},
		{"  Insufficient free space: 256 extents needed, but only 10 available\n", 5, backend.ErrResourceExhausted},
		{"  Logical Volume \"pvc-1\" already exists in volume group \"vg0\"\n", 5, backend.ErrAlreadyExists},
		{notFound, 5, backend.ErrNotFound},
		{"  Volume group \"vg0\" not found\n  Cannot process volume group vg0\n", 5, backend.ErrUnavailable},
		{"  Pool thin0 not found in Volume group vg0.\n", 5, backend.ErrUnavailable},
		{"  Logical volume vg0/lv is not a thin pool.\n", 5, backend.ErrUnavailable},
		{"  /dev/mapper/control: open failed: Operation not permitted\n  Failure to communicate with kernel device-mapper driver.\n", 5, backend.ErrUnavailable},
		{"  Logical volume vg0/pvc-1 contains a filesystem in use.\n", 5, backend.ErrInUse},
		{"  Names starting \"snapshot\" are reserved. Please choose a different LV name.\n", 3, backend.ErrInvalid},
		{"", -1, backend.ErrUnavailable},
		{"  something new\n", 5, nil},
	}
	for _, c := range cases {
		ce := &backend.CommandError{Name: "lvcreate", ExitCode: c.exit, Stderr: c.stderr}
		if c.exit < 0 {
			ce.Err = errors.New("not found")
		}
		if got := backend.Classify(classify(ce)); got != c.want { //nolint:errorlint // Classify returns the sentinel itself
			t.Errorf("classify(%q) = %v, want %v", c.stderr, got, c.want)
		}
	}
}

func vgsOutExtent(extent string) string {
	return strings.Replace(vgsOut, `"4194304B"`, `"`+extent+`"`, 1)
}

// The extent size is read once: the second create runs lvcreate and the
// read-back only, and lvcreate's refusal of a short group is the answer
// (no free space is kept or checked beforehand).
func TestExtentSizeIsKeptAndLvcreateDecidesSpace(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: lvcreate, Stdout: "  Logical volume \"pvc-1\" created.\n"},
		call{Cmd: "blkdiscard -z /dev/vg0/pvc-1"},
		call{Cmd: "lvchange --deltag pillar-csi-unwiped vg0/pvc-1"},
		call{Cmd: "lvcreate -y -n pvc-2 -L 8589934592b --addtag pillar-csi --addtag pillar-csi-unwiped vg0",
			Stderr: "  Volume group \"vg0\" has insufficient free space (1278 extents): 2048 required.\n", Exit: 5},
	)
	if _, err := b.CreateVolume(context.Background(), "pvc-1", 1, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateVolume(context.Background(), "pvc-2", 8<<30, nil); !errors.Is(err, backend.ErrResourceExhausted) {
		t.Fatalf("create beyond free space: %v", err)
	}
}

// A volume whose size disagrees with the kept extent size has the extent
// size read again before it is judged: here the group was recreated with
// 8 MiB extents, so a retried 1 MiB create finds its 8 MiB volume rather
// than a conflict with the 4 MiB it would have been.
func TestStaleExtentSizeIsReadAgain(t *testing.T) {
	t.Parallel()
	lv8 := lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"8388608", "lv_attr":"Vwi-a-tz--", "pool_lv":"thin0", "lv_tags":"pillar-csi"}`)
	b := newScripted(t, Config{ThinPool: "thin0", ProvisioningMode: "thin"},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: "lvcreate -y -n pvc-1 -V 4194304b --thinpool thin0 --addtag pillar-csi vg0", Stderr: exists, Exit: 5},
		call{Cmd: lvsPVC, Stdout: lv8},
		call{Cmd: vgsCmd, Stdout: vgsOutExtent("8388608B")},
		// 8 MiB is kept now: the same request rounds to 8 MiB, no vgs.
		call{Cmd: "lvcreate -y -n pvc-1 -V 8388608b --thinpool thin0 --addtag pillar-csi vg0", Stderr: exists, Exit: 5},
		call{Cmd: lvsPVC, Stdout: lv8},
		// A request for another size is still a conflict, after one more look.
		call{Cmd: "lvcreate -y -n pvc-1 -V 16777216b --thinpool thin0 --addtag pillar-csi vg0", Stderr: exists, Exit: 5},
		call{Cmd: lvsPVC, Stdout: lv8},
		call{Cmd: vgsCmd, Stdout: vgsOutExtent("8388608B")},
	)
	v, err := b.CreateVolume(context.Background(), "pvc-1", 1<<20, nil)
	if err != nil || v.SizeBytes != 8<<20 {
		t.Fatalf("create after the extent size changed = %+v, %v", v, err)
	}
	if v, err = b.CreateVolume(context.Background(), "pvc-1", 1<<20, nil); err != nil || v.SizeBytes != 8<<20 {
		t.Fatalf("retry = %+v, %v", v, err)
	}
	if _, err := b.CreateVolume(context.Background(), "pvc-1", 9<<20, nil); !errors.Is(err, backend.ErrAlreadyExists) {
		t.Fatalf("create of another size: %v", err)
	}
}

// A refusal saying the volume group is gone drops the kept extent size:
// the group may come back with another one.
func TestMissingGroupForgetsExtentSize(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: lvcreate, Stderr: "  Volume group \"vg0\" not found\n  Cannot process volume group vg0\n", Exit: 5},
		call{Cmd: vgsCmd, Stdout: vgsOutExtent("8388608B")},
		call{Cmd: "lvcreate -y -n pvc-1 -L 8388608b --addtag pillar-csi --addtag pillar-csi-unwiped vg0", Stdout: "  Logical volume \"pvc-1\" created.\n"},
		call{Cmd: "blkdiscard -z /dev/vg0/pvc-1"},
		call{Cmd: "lvchange --deltag pillar-csi-unwiped vg0/pvc-1"},
	)
	if _, err := b.CreateVolume(context.Background(), "pvc-1", 1, nil); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("create in a missing group: %v", err)
	}
	if v, err := b.CreateVolume(context.Background(), "pvc-1", 1, nil); err != nil || v.SizeBytes != 8<<20 {
		t.Fatalf("create in the recreated group = %+v, %v", v, err)
	}
}

// lvcreate rounding a size up means the kept extent size is stale: the LV
// is read back and the extent size read again, and the size reported is
// the LV's.
func TestRoundingUpReadsBack(t *testing.T) {
	t.Parallel()
	b := newScripted(t, Config{ThinPool: "thin0", ProvisioningMode: "thin"},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: "lvcreate -y -n pvc-1 -V 4194304b --thinpool thin0 --addtag pillar-csi vg0",
			Stdout: "  Rounding up size to full physical extent 8.00 MiB\n  Logical volume \"pvc-1\" created.\n"},
		call{Cmd: lvsPVC, Stdout: lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"8388608", "lv_attr":"Vwi-a-tz--", "pool_lv":"thin0", "lv_tags":"pillar-csi"}`)},
		call{Cmd: vgsCmd, Stdout: vgsOutExtent("8388608B")},
		call{Cmd: "lvcreate -y -n pvc-2 -V 8388608b --thinpool thin0 --addtag pillar-csi vg0", Stdout: "  Logical volume \"pvc-2\" created.\n"},
	)
	if v, err := b.CreateVolume(context.Background(), "pvc-1", 1<<20, nil); err != nil || v.SizeBytes != 8<<20 {
		t.Fatalf("create rounded up by lvcreate = %+v, %v", v, err)
	}
	if v, err := b.CreateVolume(context.Background(), "pvc-2", 1<<20, nil); err != nil || v.SizeBytes != 8<<20 {
		t.Fatalf("create with the extent size read again = %+v, %v", v, err)
	}
}

// ExpandVolume reads the extent size only when none is kept, and the size
// it reports is the one lvs reads back after lvextend.
func TestExpandUsesKeptExtentSize(t *testing.T) {
	t.Parallel()
	lv := func(size string) string {
		return lvsOut(`                  {"lv_name":"pvc-1", "lv_size":"` + size + `", "lv_attr":"-wi-a-----", "pool_lv":"", "lv_tags":"pillar-csi"}`)
	}
	b := newScripted(t, Config{},
		call{Cmd: lvsPVC, Stdout: lv("4194304")},
		call{Cmd: vgsCmd, Stdout: vgsOut},
		call{Cmd: "lvextend -L 8388608b vg0/pvc-1", Stdout: "  Logical volume vg0/pvc-1 successfully resized.\n"},
		call{Cmd: lvsPVC, Stdout: lv("8388608")},
		call{Cmd: lvsPVC, Stdout: lv("8388608")},
		call{Cmd: "lvextend -L 12582912b vg0/pvc-1", Stdout: "  Logical volume vg0/pvc-1 successfully resized.\n"},
		call{Cmd: lvsPVC, Stdout: lv("16777216")},
	)
	if v, err := b.ExpandVolume(context.Background(), "pvc-1", 5<<20); err != nil || v.SizeBytes != 8<<20 {
		t.Fatalf("expand = %+v, %v", v, err)
	}
	// lvextend rounding further (the group's extents grew meanwhile) is
	// reported as the tools report it.
	if v, err := b.ExpandVolume(context.Background(), "pvc-1", 9<<20); err != nil || v.SizeBytes != 16<<20 {
		t.Fatalf("expand = %+v, %v", v, err)
	}
}
