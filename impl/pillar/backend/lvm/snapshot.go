package lvm

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// Snapshots are thin snapshots (lvcreate -s of a thin volume, no size):
// they share the thin pool's blocks with their origin but depend on it in
// no way, so a volume with snapshots, and a snapshot with volumes restored
// from it, may each be deleted in any order. LVM gives thin snapshots the
// activation-skip flag; snapshots keep it (nothing reads them), while a
// volume restored from a snapshot or cloned from a volume, itself a thin
// snapshot, is created with --setactivationskip n so it is active and has
// its device like any volume. Linear volumes have no snapshots here: an
// old-style COW snapshot needs a preallocated size and is invalidated when
// it fills, so they are refused with ErrInvalid.
//
// Tags: a snapshot carries TagOwned, TagSnapshot and TagSourcePrefix plus
// its volume's name (the origin field empties when the origin is
// removed); a volume with content carries TagContentPrefix plus
// "snapshot:<name>" or "volume:<name>", so a retried create knows it made
// it from the same source.
const (
	TagSnapshot      = "pillar-csi-snapshot"
	TagSourcePrefix  = "pillar-csi-source:"
	TagContentPrefix = "pillar-csi-content:"
)

const snapColumns = lvColumns + ",lv_time"

// lvTimeLayout is how lvs prints lv_time.
const lvTimeLayout = "2006-01-02 15:04:05 -0700"

func (l lv) snapshot() bool { return l.tagged(TagSnapshot) }

// tagValue is the rest of the first tag starting prefix.
func (l lv) tagValue(prefix string) string {
	for _, t := range l.tags {
		if v, ok := strings.CutPrefix(t, prefix); ok {
			return v
		}
	}
	return ""
}

type snapLV struct {
	lv
	created time.Time
}

func (b *Backend) listSnapLVs(ctx context.Context, target string) ([]snapLV, error) {
	args := append(append([]string{}, reportArgs...), "-o", snapColumns, target)
	out, err := b.run.Run(ctx, "lvs", args...)
	if err != nil {
		return nil, err
	}
	rows, err := parseReport(out, "lv")
	if err != nil {
		return nil, err
	}
	lvs, err := parseLVs(out)
	if err != nil {
		return nil, err
	}
	res := make([]snapLV, len(lvs))
	for i, l := range lvs {
		res[i].lv = l
		// An unreadable time is left zero rather than failing the list.
		res[i].created, _ = time.Parse(lvTimeLayout, rows[i]["lv_time"])
	}
	return res, nil
}

func (b *Backend) snapshotOf(l snapLV) backend.Snapshot {
	return backend.Snapshot{Name: l.name, SourceVolume: l.tagValue(TagSourcePrefix), SizeBytes: l.size, CreatedAt: l.created.UTC(), Native: b.cfg.VolumeGroup + "/" + l.name}
}

// getSnap reads one LV with its creation time.
func (b *Backend) getSnap(ctx context.Context, name string) (snapLV, bool, error) {
	lvs, err := b.listSnapLVs(ctx, b.cfg.VolumeGroup+"/"+name)
	if err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return snapLV{}, false, nil
		}
		return snapLV{}, false, fmt.Errorf("lvm: %s/%s: %w", b.cfg.VolumeGroup, name, err)
	}
	if len(lvs) != 1 || lvs[0].name != name {
		return snapLV{}, false, fmt.Errorf("lvm: lvs %s/%s: unexpected output", b.cfg.VolumeGroup, name)
	}
	return lvs[0], true, nil
}

func checkSnapshotName(name string) error {
	if err := backend.ValidateSnapshotName(name); err != nil {
		return err
	}
	return checkLVName(name)
}

func (b *Backend) ListSnapshots(ctx context.Context) ([]backend.Snapshot, error) {
	lvs, err := b.listSnapLVs(ctx, b.cfg.VolumeGroup)
	if err != nil {
		return nil, fmt.Errorf("lvm: list %s: %w", b.cfg.VolumeGroup, classify(err))
	}
	list := []backend.Snapshot{}
	for _, l := range lvs {
		if l.owned() && l.snapshot() {
			list = append(list, b.snapshotOf(l))
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

func (b *Backend) GetSnapshot(ctx context.Context, name string) (backend.Snapshot, error) {
	if err := checkSnapshotName(name); err != nil {
		return backend.Snapshot{}, err
	}
	l, found, err := b.getSnap(ctx, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if !found || !l.owned() || !l.snapshot() {
		return backend.Snapshot{}, fmt.Errorf("lvm: snapshot: %w", b.missing(ctx, name))
	}
	return b.snapshotOf(l), nil
}

// thinSource finds the owned thin volume a snapshot or clone is taken of.
func (b *Backend) thinSource(ctx context.Context, name, what string) (lv, error) {
	l, found, err := b.get(ctx, name)
	if err != nil {
		return lv{}, err
	}
	if !found || l.mode() == "" || l.snapshot() {
		return lv{}, fmt.Errorf("lvm: %s: %w", what, b.missing(ctx, name))
	}
	if !l.owned() {
		return lv{}, b.notOwned(name)
	}
	if l.mode() != backend.ModeThin {
		return lv{}, fmt.Errorf("lvm: %s/%s is a linear volume: LVM snapshots and clones need thin volumes (provisioningMode thin): %w", b.cfg.VolumeGroup, name, backend.ErrInvalid)
	}
	return l, nil
}

func (b *Backend) CreateSnapshot(ctx context.Context, name, source string) (backend.Snapshot, error) {
	if err := errors.Join(checkSnapshotName(name), backend.ValidateVolumeName(source)); err != nil {
		return backend.Snapshot{}, err
	}
	if s, done, err := b.existingSnapshot(ctx, name, source); done {
		return s, err
	}
	if _, err := b.thinSource(ctx, source, "snapshot source"); err != nil {
		return backend.Snapshot{}, err
	}
	args := []string{"-y", "-s", "-n", name, "--addtag", TagOwned, "--addtag", TagSnapshot, "--addtag", TagSourcePrefix + source, b.cfg.VolumeGroup + "/" + source}
	if _, err := b.run.Run(ctx, "lvcreate", args...); err != nil {
		if err = classify(err); !errors.Is(err, backend.ErrAlreadyExists) {
			return backend.Snapshot{}, fmt.Errorf("lvm: snapshot %s/%s: %w", b.cfg.VolumeGroup, source, err)
		}
	}
	s, done, err := b.existingSnapshot(ctx, name, source)
	if !done {
		err = fmt.Errorf("lvm: snapshot %s/%s vanished after create", b.cfg.VolumeGroup, name)
	}
	return s, err
}

// existingSnapshot checks an LV already named name against a snapshot
// request; done is false when there is none.
func (b *Backend) existingSnapshot(ctx context.Context, name, source string) (backend.Snapshot, bool, error) {
	l, found, err := b.getSnap(ctx, name)
	switch {
	case err != nil:
		return backend.Snapshot{}, true, err
	case !found:
		return backend.Snapshot{}, false, nil
	case !l.owned():
		return backend.Snapshot{}, true, b.notOwned(name)
	case !l.snapshot():
		return backend.Snapshot{}, true, fmt.Errorf("lvm: %s/%s exists and is a volume, not a snapshot: %w", b.cfg.VolumeGroup, name, backend.ErrAlreadyExists)
	case l.tagValue(TagSourcePrefix) != source:
		return backend.Snapshot{}, true, fmt.Errorf("lvm: snapshot %s/%s exists of volume %s, not %s: %w", b.cfg.VolumeGroup, name, l.tagValue(TagSourcePrefix), source, backend.ErrAlreadyExists)
	}
	return b.snapshotOf(l), true, nil
}

func (b *Backend) DeleteSnapshot(ctx context.Context, name string) error {
	if err := checkSnapshotName(name); err != nil {
		return err
	}
	l, found, err := b.get(ctx, name)
	if err != nil || !found {
		return err
	}
	lvPath := b.cfg.VolumeGroup + "/" + name
	if !l.owned() {
		return b.notOwned(name)
	}
	if !l.snapshot() {
		return fmt.Errorf("lvm: %s is a volume, not a snapshot; refusing to remove it: %w", lvPath, backend.ErrInvalid)
	}
	if _, err := b.run.Run(ctx, "lvremove", "-y", lvPath); err != nil {
		if err = classify(err); !errors.Is(err, backend.ErrNotFound) {
			return fmt.Errorf("lvm: remove snapshot %s: %w", lvPath, err)
		}
	}
	return nil
}

// CreateVolumeFrom makes a thin snapshot of the snapshot or volume,
// active, tagged as a volume, then grows it to the requested size.
func (b *Backend) CreateVolumeFrom(ctx context.Context, name string, sizeBytes int64, src backend.Source, params map[string]string) (backend.Volume, error) {
	if err := errors.Join(checkLVName(name), src.Validate()); err != nil {
		return backend.Volume{}, err
	}
	mode, err := b.resolveMode(params)
	if err != nil {
		return backend.Volume{}, err
	}
	if mode != backend.ModeThin {
		return backend.Volume{}, fmt.Errorf("lvm: a volume from a %s is a thin snapshot; provisioningMode %s cannot have one (use thin): %w", src, mode, backend.ErrInvalid)
	}
	var origin, content string
	var srcSize int64
	if src.Snapshot != "" {
		s, err := b.GetSnapshot(ctx, src.Snapshot)
		if err != nil {
			return backend.Volume{}, err
		}
		origin, content, srcSize = src.Snapshot, "snapshot:"+src.Snapshot, s.SizeBytes
	} else {
		l, err := b.thinSource(ctx, src.Volume, "clone source")
		if err != nil {
			return backend.Volume{}, err
		}
		origin, content, srcSize = src.Volume, "volume:"+src.Volume, l.size
	}
	if err := backend.CheckSourceSize(sizeBytes, srcSize, src); err != nil {
		return backend.Volume{}, err
	}
	vg, err := b.vg(ctx)
	if err != nil {
		return backend.Volume{}, err
	}
	size := backend.RoundUp(max(sizeBytes, srcSize), vg.extentSize)
	l, found, err := b.get(ctx, name)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found {
		args := []string{"-y", "-s", "--setactivationskip", "n", "-n", name, "--addtag", TagOwned, "--addtag", TagContentPrefix + content, b.cfg.VolumeGroup + "/" + origin}
		if _, err := b.run.Run(ctx, "lvcreate", args...); err != nil {
			if err = classify(err); !errors.Is(err, backend.ErrAlreadyExists) {
				return backend.Volume{}, fmt.Errorf("lvm: create %s/%s from %s: %w", b.cfg.VolumeGroup, name, src, err)
			}
		}
		if l, found, err = b.get(ctx, name); err != nil {
			return backend.Volume{}, err
		} else if !found {
			return backend.Volume{}, fmt.Errorf("lvm: %s/%s vanished after create", b.cfg.VolumeGroup, name)
		}
		// Whatever tags the new LV took over from its origin, it is a
		// volume now.
		retag := false
		for _, t := range l.tags {
			if t == TagSnapshot || strings.HasPrefix(t, TagSourcePrefix) || (strings.HasPrefix(t, TagContentPrefix) && t != TagContentPrefix+content) {
				if _, err := b.run.Run(ctx, "lvchange", "--deltag", t, b.cfg.VolumeGroup+"/"+name); err != nil {
					return backend.Volume{}, fmt.Errorf("lvm: untag %s/%s: %w", b.cfg.VolumeGroup, name, classify(err))
				}
				retag = true
			}
		}
		if retag {
			if l, _, err = b.get(ctx, name); err != nil {
				return backend.Volume{}, err
			}
		}
	}
	native := b.cfg.VolumeGroup + "/" + name
	switch {
	case !l.owned():
		return backend.Volume{}, b.notOwned(name)
	case l.snapshot() || l.mode() != backend.ModeThin || !l.tagged(TagContentPrefix+content):
		return backend.Volume{}, fmt.Errorf("lvm: %s exists and is not a volume made from %s: %w", native, src, backend.ErrAlreadyExists)
	case l.size < size && l.size == backend.RoundUp(srcSize, vg.extentSize):
		// A fresh snapshot has its origin's size; grow it (a retry finds
		// it grown).
		if _, err := b.run.Run(ctx, "lvextend", "-L", strconv.FormatInt(size, 10)+"b", native); err != nil {
			return backend.Volume{}, fmt.Errorf("lvm: grow %s: %w", native, classify(err))
		}
		if l, _, err = b.get(ctx, name); err != nil {
			return backend.Volume{}, err
		}
	}
	if l.size != size {
		return backend.Volume{}, fmt.Errorf("lvm: volume %s exists with %d bytes, request needs %d: %w", native, l.size, size, backend.ErrAlreadyExists)
	}
	return b.volume(l), nil
}
