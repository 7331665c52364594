package zfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// Snapshots are ZFS snapshots of the zvols (<dataset>@<name>); a volume
// restored from one is a `zfs clone` of it, and a clone of a volume is a
// clone of a hidden snapshot (<source>@pillar-clone-<name>) taken for it.
// A clone keeps its origin snapshot, so a snapshot is deleted with
// `zfs destroy -d`: with volumes restored from it, ZFS marks it
// defer_destroy=on and destroys it with the last of them. A marked
// snapshot is deleted for every caller (never listed, found or restored
// from), so snapshots and restored volumes are independent as Kubernetes
// expects; its source volume still has it and stays ErrInUse (the CSI
// FAILED_PRECONDITION) until the restored volumes go, never a silent
// `destroy -R`. Deleting a volume made from another volume also destroys
// its hidden origin snapshot. docs/decisions.md, "Snapshots and clones",
// says why.

const snapColumns = "name,volsize,creation,defer_destroy"

// parseSnapshots reads `zfs list -Hp -t snapshot -o name,volsize,creation,defer_destroy`
// and keeps the visible snapshots of this backend's volumes: not hidden
// clone origins, not snapshots already deleted but kept for their clones.
func (b *Backend) parseSnapshots(out []byte) ([]backend.Snapshot, error) {
	var snaps []backend.Snapshot
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("zfs list: unexpected line %q", line)
		}
		ds, name, ok := strings.Cut(f[0], "@")
		if !ok || path.Dir(ds) != b.root() || strings.HasPrefix(name, backend.HiddenSnapshotPrefix) || f[3] == "on" {
			continue
		}
		size, err1 := strconv.ParseInt(f[1], 10, 64)
		created, err2 := strconv.ParseInt(f[2], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			// Snapshots of filesystems have no volsize: not volumes' ones.
			if f[1] == "-" {
				continue
			}
			return nil, fmt.Errorf("zfs list: unexpected line %q: %w", line, err)
		}
		snaps = append(snaps, backend.Snapshot{Name: name, SourceVolume: path.Base(ds), SizeBytes: size, CreatedAt: time.Unix(created, 0).UTC(), Native: f[0]})
	}
	return snaps, nil
}

func (b *Backend) ListSnapshots(ctx context.Context) ([]backend.Snapshot, error) {
	out, err := b.run.Run(ctx, "zfs", "list", "-Hp", "-t", "snapshot", "-r", "-o", snapColumns, b.root())
	if err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("zfs: dataset %s does not exist: %w", b.root(), backend.ErrUnavailable)
		}
		return nil, fmt.Errorf("zfs: list snapshots: %w", err)
	}
	snaps, err := b.parseSnapshots(out)
	if err != nil {
		return nil, err
	}
	sort.Slice(snaps, func(i, j int) bool { return snaps[i].Name < snaps[j].Name })
	if snaps == nil {
		snaps = []backend.Snapshot{}
	}
	return snaps, nil
}

// findSnapshot looks a snapshot up by name among every volume's.
func (b *Backend) findSnapshot(ctx context.Context, name string) (backend.Snapshot, bool, error) {
	snaps, err := b.ListSnapshots(ctx)
	if err != nil {
		return backend.Snapshot{}, false, err
	}
	var found []backend.Snapshot
	for _, s := range snaps {
		if s.Name == name {
			found = append(found, s)
		}
	}
	switch len(found) {
	case 0:
		return backend.Snapshot{}, false, nil
	case 1:
		return found[0], true, nil
	}
	return backend.Snapshot{}, false, fmt.Errorf("zfs: snapshot name %q is used by %s and %s: %w", name, found[0].Native, found[1].Native, backend.ErrAlreadyExists)
}

func (b *Backend) GetSnapshot(ctx context.Context, name string) (backend.Snapshot, error) {
	if err := backend.ValidateSnapshotName(name); err != nil {
		return backend.Snapshot{}, err
	}
	s, found, err := b.findSnapshot(ctx, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if !found {
		return backend.Snapshot{}, fmt.Errorf("zfs: snapshot %s in %s: %w", name, b.root(), backend.ErrNotFound)
	}
	return s, nil
}

func (b *Backend) CreateSnapshot(ctx context.Context, name, source string) (backend.Snapshot, error) {
	if err := errors.Join(backend.ValidateSnapshotName(name), backend.ValidateVolumeName(source)); err != nil {
		return backend.Snapshot{}, err
	}
	existing, found, err := b.findSnapshot(ctx, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if found {
		if existing.SourceVolume != source {
			return backend.Snapshot{}, fmt.Errorf("zfs: snapshot %s exists of volume %s, not %s: %w", name, existing.SourceVolume, source, backend.ErrAlreadyExists)
		}
		return existing, nil
	}
	if _, err := b.GetVolume(ctx, source); err != nil {
		return backend.Snapshot{}, fmt.Errorf("zfs: snapshot source: %w", err)
	}
	native := b.dataset(source) + "@" + name
	if _, err := b.run.Run(ctx, "zfs", "snapshot", native); err != nil {
		err = classify(err)
		if !errors.Is(err, backend.ErrAlreadyExists) {
			return backend.Snapshot{}, fmt.Errorf("zfs: snapshot %s: %w", native, err)
		}
	}
	s, found, err := b.findSnapshot(ctx, name)
	if err != nil {
		return backend.Snapshot{}, err
	}
	if !found {
		// The name is held by a deleted snapshot that ZFS keeps until the
		// volumes restored from it are deleted.
		return backend.Snapshot{}, fmt.Errorf("zfs: snapshot %s was deleted and is kept until the volumes restored from it are deleted; choose another name: %w", native, backend.ErrAlreadyExists)
	}
	return s, nil
}

func (b *Backend) DeleteSnapshot(ctx context.Context, name string) error {
	if err := backend.ValidateSnapshotName(name); err != nil {
		return err
	}
	s, found, err := b.findSnapshot(ctx, name)
	if err != nil || !found {
		return err
	}
	// -d destroys a snapshot without clones at once and marks one with
	// clones for ZFS to destroy with its last clone, in one step: no
	// window between checking for clones and destroying.
	if _, err := b.run.Run(ctx, "zfs", "destroy", "-d", s.Native); err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("zfs: destroy %s: %w", s.Native, err)
	}
	return nil
}

// origin is a dataset's origin snapshot, "" when it is not a clone.
func (b *Backend) origin(ctx context.Context, ds string) (string, error) {
	out, err := b.run.Run(ctx, "zfs", "list", "-Hp", "-o", "origin", ds)
	if err != nil {
		return "", fmt.Errorf("zfs: origin of %s: %w", ds, classify(err))
	}
	o := strings.TrimSpace(string(out))
	if o == "-" {
		o = ""
	}
	return o, nil
}

// CreateVolumeFrom clones a snapshot, or a hidden snapshot of a volume,
// then grows the clone to the requested size. Parameters are ZFS
// properties as for CreateVolume, except volblocksize, which a clone
// takes from its origin.
func (b *Backend) CreateVolumeFrom(ctx context.Context, name string, sizeBytes int64, src backend.Source, params map[string]string) (backend.Volume, error) {
	if err := errors.Join(backend.ValidateVolumeName(name), src.Validate(), checkParams(params)); err != nil {
		return backend.Volume{}, err
	}
	var origin string
	var srcSize int64
	if src.Snapshot != "" {
		s, err := b.GetSnapshot(ctx, src.Snapshot)
		if err != nil {
			return backend.Volume{}, err
		}
		origin, srcSize = s.Native, s.SizeBytes
	} else {
		v, err := b.GetVolume(ctx, src.Volume)
		if err != nil {
			return backend.Volume{}, fmt.Errorf("zfs: clone source: %w", err)
		}
		origin, srcSize = v.Native+"@"+backend.HiddenSnapshotPrefix+name, v.SizeBytes
	}
	if err := backend.CheckSourceSize(sizeBytes, srcSize, src); err != nil {
		return backend.Volume{}, err
	}
	size := max(sizeBytes, srcSize)
	ds := b.dataset(name)
	existing, found, err := b.get(ctx, ds)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found {
		if src.Volume != "" {
			if _, err := b.run.Run(ctx, "zfs", "snapshot", origin); err != nil {
				if err = classify(err); !errors.Is(err, backend.ErrAlreadyExists) {
					return backend.Volume{}, fmt.Errorf("zfs: snapshot %s for a clone: %w", origin, err)
				}
			}
		}
		args := []string{"clone"}
		keys := make([]string, 0, len(params))
		for k := range params {
			if k != "volblocksize" {
				keys = append(keys, k)
			}
		}
		sort.Strings(keys)
		for _, k := range keys {
			args = append(args, "-o", k+"="+params[k])
		}
		if _, err := b.run.Run(ctx, "zfs", append(args, origin, ds)...); err != nil {
			if err = classify(err); !errors.Is(err, backend.ErrAlreadyExists) {
				return backend.Volume{}, fmt.Errorf("zfs: clone %s to %s: %w", origin, ds, err)
			}
		}
		if existing, found, err = b.get(ctx, ds); err != nil {
			return backend.Volume{}, err
		} else if !found {
			return backend.Volume{}, fmt.Errorf("zfs: %s vanished after clone", ds)
		}
	}
	if existing.dsType != "volume" {
		return backend.Volume{}, fmt.Errorf("zfs: %s exists and is a %s, not a volume: %w", ds, existing.dsType, backend.ErrAlreadyExists)
	}
	if got, err := b.origin(ctx, ds); err != nil {
		return backend.Volume{}, err
	} else if got != origin {
		return backend.Volume{}, fmt.Errorf("zfs: volume %s exists with origin %q, not %s: %w", ds, got, origin, backend.ErrAlreadyExists)
	}
	target := backend.RoundUp(size, existing.volblocksize)
	if existing.volsize < target && existing.volsize == backend.RoundUp(srcSize, existing.volblocksize) {
		// A fresh clone has its origin's size; grow it (a retry finds
		// it grown).
		if _, err := b.run.Run(ctx, "zfs", "set", "volsize="+strconv.FormatInt(target, 10), ds); err != nil {
			return backend.Volume{}, fmt.Errorf("zfs: grow clone %s: %w", ds, classify(err))
		}
		if existing, _, err = b.get(ctx, ds); err != nil {
			return backend.Volume{}, err
		}
	}
	return b.compatible(existing, size)
}
