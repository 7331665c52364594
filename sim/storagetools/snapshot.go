package storagetools

import (
	"bytes"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// Snapshots and clones: ZFS snapshots (zfs snapshot ds@name, zfs clone,
// zfs destroy ds@name) and LVM thin snapshots (lvcreate -s of a thin LV).
// A snapshot's content is a sparse copy of its volume's backing file at
// the time it is taken, and a clone or a thin snapshot starts as a sparse
// copy of its origin, so data written before a snapshot reads back from a
// volume restored from it and data written after does not. Space is not
// accounted to ZFS snapshots (real ZFS charges the blocks they hold).

const typeSnapshot = "snapshot"

// zfsSnapPath is the backing file of a ZFS snapshot; snapshots of zvols
// have no device node (snapdev=hidden), so it lives outside the device
// root.
func (h *Host) zfsSnapPath(snap string) string {
	return filepath.Join(h.dir, "zfs-snapshots", url.PathEscape(snap))
}

// copySparse copies src to dst (created, size bytes), skipping blocks of
// zeros so the copy stays as sparse as the data allows.
func copySparse(src, dst string, size int64) error {
	if err := createBacking(dst, size); err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	buf := make([]byte, 64*kib)
	zero := make([]byte, len(buf))
	for off := int64(0); off < size; {
		n, err := in.ReadAt(buf, off)
		if n > 0 && !bytes.Equal(buf[:n], zero[:n]) {
			if _, werr := out.WriteAt(buf[:n], off); werr != nil {
				out.Close()
				return werr
			}
		}
		off += int64(n)
		if err == io.EOF || n == 0 {
			break
		}
		if err != nil {
			out.Close()
			return err
		}
	}
	return out.Close()
}

// clonesOf lists the clones of a snapshot, sorted.
func (t *tool) clonesOf(snap string) []string {
	var clones []string
	for name, d := range t.st.Datasets {
		if d.Origin == snap {
			clones = append(clones, name)
		}
	}
	sort.Strings(clones)
	return clones
}

func (t *tool) zfsSnapshot(args []string) int {
	_, pos, err := parseOpts(args, []option{{name: "r", short: 'r'}, {name: "o", short: 'o', arg: true}})
	if err != nil || len(pos) != 1 {
		if err == nil {
			err = fmt.Errorf("missing snapshot argument")
		}
		t.errorf("%v\nusage:\n\tsnapshot [-r] [-o property=value] ... <filesystem|volume>@<snap> ...\n", err)
		return zfsUsage
	}
	name := pos[0]
	ds, snap, ok := strings.Cut(name, "@")
	if !ok || snap == "" || checkDatasetComponent(snap) != nil || !validDatasetName(ds) {
		t.errorf("cannot create snapshot '%s': invalid character in name\n", name)
		return zfsFailed
	}
	d, exists := t.st.Datasets[ds]
	if !exists {
		t.errorf("cannot open '%s': dataset does not exist\nusage:\n\tsnapshot [-r] [-o property=value] ... <filesystem|volume>@<snap> ...\n", ds)
		return zfsFailed
	}
	if t.poolSuspended(poolOf(ds)) {
		t.errorf("cannot create snapshot '%s': pool I/O is currently suspended\n", name)
		return zfsFailed
	}
	if _, dup := t.st.Datasets[name]; dup {
		t.errorf("cannot create snapshot '%s': dataset already exists\n", name)
		return zfsFailed
	}
	s := &dataset{Type: typeSnapshot, Volsize: d.Volsize, Volblocksize: d.Volblocksize, GUID: randomGUID(), Creation: time.Now().Unix()}
	if d.Type == typeVolume {
		if err := copySparse(t.host.zvolPath(ds), t.host.zfsSnapPath(name), d.Volsize); err != nil {
			t.errorf("cannot create snapshot '%s': %v\n", name, err)
			return zfsFailed
		}
	}
	t.st.Datasets[name] = s
	return 0
}

func (t *tool) zfsClone(args []string) int {
	opts, pos, err := parseOpts(args, []option{{name: "p", short: 'p'}, {name: "o", short: 'o', arg: true}})
	if err != nil || len(pos) != 2 {
		if err == nil {
			err = fmt.Errorf("missing source or target dataset argument")
		}
		t.errorf("%v\nusage:\n\tclone [-p] [-o property=value] ... <snapshot> <filesystem|volume>\n", err)
		return zfsUsage
	}
	snap, target := pos[0], pos[1]
	s, ok := t.st.Datasets[snap]
	if !ok || s.Type != typeSnapshot {
		t.errorf("cannot open '%s': dataset does not exist\n", snap)
		return zfsFailed
	}
	fail := func(format string, a ...any) int {
		t.errorf("cannot create '%s': %s\n", target, fmt.Sprintf(format, a...))
		return zfsFailed
	}
	if !validDatasetName(target) {
		return fail("invalid character in name")
	}
	if poolOf(target) != poolOf(snap) {
		return fail("source and target pools differ")
	}
	if t.poolSuspended(poolOf(target)) {
		return fail("pool I/O is currently suspended")
	}
	if pd, ok := t.st.Datasets[parentOf(target)]; !ok {
		return fail("parent does not exist")
	} else if pd.Type != typeFilesystem {
		return fail("parent is not a filesystem")
	}
	if _, ok := t.st.Datasets[target]; ok {
		return fail("dataset already exists")
	}
	src := t.st.Datasets[strings.SplitN(snap, "@", 2)[0]]
	dsType := typeVolume
	if s.Volsize == 0 {
		dsType = typeFilesystem
	}
	props := map[string]string{}
	for _, kv := range opts["o"] {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.errorf("missing '=' for property=value argument\n")
			return zfsUsage
		}
		if msg := checkPropValue(k, v, dsType); msg != "" {
			return fail("%s", msg)
		}
		switch k {
		case "volsize", "volblocksize":
			return fail("'%s' is readonly", k)
		}
		props[k] = v
	}
	d := &dataset{Type: dsType, Volsize: s.Volsize, Volblocksize: s.Volblocksize, GUID: randomGUID(), Props: map[string]string{}, Origin: snap, Creation: time.Now().Unix()}
	if src != nil {
		for k, v := range src.Props {
			d.Props[k] = v
		}
	}
	for k, v := range props {
		if k == "refreservation" {
			continue // clones are sparse; an explicit one is not simulated
		}
		d.Props[k] = v
	}
	if dsType == typeVolume {
		if err := copySparse(t.host.zfsSnapPath(snap), t.host.zvolPath(target), d.Volsize); err != nil {
			return fail("%v", err)
		}
	}
	t.st.Datasets[target] = d
	return 0
}

// zfsDestroySnapshot destroys ds@snap. While clones depend on it, it is
// refused, or with -d (defer) marked defer_destroy=on and left for the
// last clone's destroy to take.
func (t *tool) zfsDestroySnapshot(name string, deferred bool) int {
	d, ok := t.st.Datasets[name]
	if !ok || d.Type != typeSnapshot {
		t.errorf("could not find any snapshots to destroy; check snapshot names.\n")
		return zfsFailed
	}
	if clones := t.clonesOf(name); len(clones) > 0 {
		if deferred {
			d.DeferDestroy = true
			return 0
		}
		// zfs(8) finds the clones before it asks the kernel, and lists them
		// (OpenZFS 2.1 under qemu, conformance/kernel/guest).
		t.errorf("cannot destroy '%s': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n%s\n", name, strings.Join(clones, "\n"))
		return zfsFailed
	}
	t.removeDataset(name)
	return 0
}

// removeDataset drops a dataset and its backing file; a clone's origin
// marked for deferred destroy goes with its last clone, as in ZFS.
func (t *tool) removeDataset(ds string) {
	d, ok := t.st.Datasets[ds]
	if !ok {
		return
	}
	switch d.Type {
	case typeVolume:
		removeBacking(t.host.zvolPath(ds), filepath.Join(t.host.DeviceRoot(), "zvol"))
	case typeSnapshot:
		os.Remove(t.host.zfsSnapPath(ds))
	}
	delete(t.st.Datasets, ds)
	if o, ok := t.st.Datasets[d.Origin]; ok && o.DeferDestroy && len(t.clonesOf(d.Origin)) == 0 {
		t.removeDataset(d.Origin)
	}
}

// lvcreateSnapshot simulates `lvcreate -s [-n name] [-k|--setactivationskip
// y|n] [--addtag t] vg/origin`, a thin snapshot of a thin LV (old-style
// COW snapshots, which need a size, are not simulated).
func (t *tool) lvcreateSnapshot(opts parsedOpts, pos []string) int {
	if len(pos) != 1 {
		t.errorf("  Please specify a logical volume to act as the snapshot origin.\n")
		return lvmInvalidCmdLine
	}
	if opts.has("size") || opts.has("extents") {
		t.errorf("  fakestorage: COW snapshots (-s with a size) are not simulated\n")
		return lvmInvalidCmdLine
	}
	vgName, originName := splitLVPath(pos[0])
	vg, origin, code := t.findLV(vgName, originName)
	if code != 0 {
		return code
	}
	if origin.Type != lvThin {
		// What lvcreate says for a sizeless snapshot of a non-thin LV.
		t.errorf("  Please specify either size or extents with snapshots.\n")
		return lvmInvalidCmdLine
	}
	lvName := opts.last("name")
	if lvName == "" {
		t.errorf("  fakestorage: unnamed snapshots are not simulated\n")
		return lvmInvalidCmdLine
	}
	if msg, code := checkLVName(lvName); msg != "" {
		t.errorf("  %s\n", msg)
		return code
	}
	if _, exists := vg.LVs[lvName]; exists {
		t.errorf("  Logical Volume \"%s\" already exists in volume group \"%s\"\n", lvName, vgName)
		return lvmFailed
	}
	skip := true // thin snapshots get the activation-skip flag by default
	if v := opts.last("setactivationskip"); v != "" {
		switch v {
		case "y":
		case "n":
			skip = false
		default:
			t.errorf("  Invalid argument for --setactivationskip: %s\n", v)
			return lvmInvalidCmdLine
		}
	}
	lv := &logicalVolume{Type: lvThin, Extents: origin.Extents, Pool: origin.Pool, UUID: lvmUUID(), Origin: originName, ActivationSkip: skip, Created: time.Now().Unix()}
	for _, tag := range opts["addtag"] {
		if msg := checkTag(tag); msg != "" {
			t.errorf("  %s\n", msg)
			return lvmInvalidCmdLine
		}
		lv.Tags = addTag(lv.Tags, tag)
	}
	t.warnThinOvercommit(vgName, vg, origin.Pool, lv.Extents)
	if err := copySparse(t.host.lvPath(vgName, originName), t.host.lvPath(vgName, lvName), lv.Extents*vg.ExtentSize); err != nil {
		t.errorf("  fakestorage: %v\n", err)
		return lvmFailed
	}
	vg.LVs[lvName] = lv
	t.printf("  Logical volume \"%s\" created.\n", lvName)
	return 0
}
