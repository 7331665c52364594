package storagetools

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Freed extents: a removed linear LV's backing file is kept, data and all,
// in <dir>/freed/<vg>/, and the next linear LV of the group takes it over,
// so the simulation shows what a real volume group does: a new linear LV
// can read what a removed one wrote.

func (h *Host) freedDir(vg string) string { return filepath.Join(h.dir, "freed", vg) }

// freeBacking moves a removed linear LV's backing file to the group's freed
// extents.
func (h *Host) freeBacking(vg, path string) {
	dir := h.freedDir(vg)
	if err := os.MkdirAll(dir, 0o755); err == nil {
		if os.Rename(path, filepath.Join(dir, lvmUUID())) == nil {
			removeBacking(path, h.DeviceRoot())
			return
		}
	}
	removeBacking(path, h.DeviceRoot())
}

// reuseBacking makes path the backing file of a new linear LV of size
// bytes: a freed file of the group when there is one (its data kept), a
// fresh sparse file otherwise. zeroHead zeroes the first 4 KiB as
// `lvcreate -Z y` does.
func (h *Host) reuseBacking(vg, path string, size int64, zeroHead bool) error {
	freed, _ := os.ReadDir(h.freedDir(vg))
	names := make([]string, 0, len(freed))
	for _, f := range freed {
		names = append(names, f.Name())
	}
	sort.Strings(names)
	reused := false
	if len(names) > 0 {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.Rename(filepath.Join(h.freedDir(vg), names[0]), path); err == nil {
			reused = true
			if err := os.Truncate(path, size); err != nil {
				return err
			}
		}
	}
	if !reused {
		return createBacking(path, size)
	}
	if !zeroHead {
		return nil
	}
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = f.WriteAt(make([]byte, min(4096, size)), 0)
	return err
}

var blkdiscardOptions = []option{
	{name: "zeroout", short: 'z', long: "zeroout"},
	{name: "force", short: 'f', long: "force"},
	{name: "verbose", short: 'v', long: "verbose"},
}

// blkdiscard discards (or with -z zeroes) a whole simulated device: both
// read back as zeros afterwards, as on a loop device.
func (t *tool) blkdiscard(args []string) int {
	_, pos, err := parseOpts(args, blkdiscardOptions)
	if err != nil {
		t.errorf("blkdiscard: %v\n", err)
		return 1
	}
	if len(pos) != 1 {
		t.errorf("blkdiscard: no device specified\n")
		return 1
	}
	dev := pos[0]
	root := t.host.DeviceRoot()
	if !strings.HasPrefix(filepath.Clean(dev), root+string(filepath.Separator)) {
		t.errorf("blkdiscard: cannot open %s: fakestorage simulates only devices under %s\n", dev, root)
		return 1
	}
	fi, err := os.Stat(dev)
	if err != nil {
		t.errorf("blkdiscard: cannot open %s: No such file or directory\n", dev)
		return 1
	}
	// Truncating to nothing and back leaves a sparse file of zeros.
	if err := os.Truncate(dev, 0); err != nil {
		t.errorf("blkdiscard: %s: %v\n", dev, err)
		return 1
	}
	if err := os.Truncate(dev, fi.Size()); err != nil {
		t.errorf("blkdiscard: %s: %v\n", dev, err)
		return 1
	}
	return 0
}
