package backend

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Snapshots are read-only point-in-time copies of a volume, and a volume
// may be created with a snapshot's or another volume's content
// (docs/decisions.md, "Snapshots and clones"). Snapshot names share the
// volume name rules; within one pool a snapshot name is unique whatever
// its source.
type Snapshotter interface {
	// CreateSnapshot snapshots volume source under name. An existing
	// snapshot of that name and source is returned; one of another source
	// is ErrAlreadyExists. A missing source is ErrNotFound; a source that
	// cannot be snapshotted (a linear LV) is ErrInvalid.
	CreateSnapshot(ctx context.Context, name, source string) (Snapshot, error)
	// GetSnapshot returns one snapshot or ErrNotFound.
	GetSnapshot(ctx context.Context, name string) (Snapshot, error)
	// ListSnapshots returns this backend's snapshots sorted by name.
	ListSnapshots(ctx context.Context) ([]Snapshot, error)
	// DeleteSnapshot removes a snapshot; a missing one is not an error.
	// A snapshot other volumes still depend on is ErrInUse.
	DeleteSnapshot(ctx context.Context, name string) error
	// CreateVolumeFrom creates volume name with the content of src, of at
	// least sizeBytes (0: the source's size). A size below the source's is
	// ErrOutOfRange. An existing volume made from the same source with the
	// size the request rounds to is returned; any other is
	// ErrAlreadyExists.
	CreateVolumeFrom(ctx context.Context, name string, sizeBytes int64, src Source, params map[string]string) (Volume, error)
}

// Source is the content of a new volume: exactly one of Snapshot or Volume.
type Source struct {
	Snapshot string
	Volume   string
}

func (s Source) String() string {
	if s.Snapshot != "" {
		return "snapshot " + s.Snapshot
	}
	return "volume " + s.Volume
}

// Validate checks exactly one source is named, with a valid name.
func (s Source) Validate() error {
	switch {
	case (s.Snapshot == "") == (s.Volume == ""):
		return fmt.Errorf("a volume source names exactly one snapshot or volume: %w", ErrInvalid)
	case s.Snapshot != "":
		return ValidateSnapshotName(s.Snapshot)
	}
	return ValidateVolumeName(s.Volume)
}

// Snapshot is one snapshot of a backend.
type Snapshot struct {
	Name string
	// SourceVolume is the volume it was taken of.
	SourceVolume string
	// SizeBytes is the source's size when the snapshot was taken: the
	// smallest volume it can be restored to.
	SizeBytes int64
	// CreatedAt is when the tools say it was taken (second precision).
	CreatedAt time.Time
	// Native is the tools' own name: "pool/parent/vol@snap" or "vg/lv".
	Native string
}

// HiddenSnapshotPrefix starts the names of snapshots a backend takes for
// its own use (the origin of a ZFS clone of a volume); they are never
// listed and user snapshots may not use it.
const HiddenSnapshotPrefix = "pillar-clone-"

// ValidateSnapshotName applies the volume name rules and keeps the hidden
// prefix for the backends.
func ValidateSnapshotName(name string) error {
	if err := ValidateVolumeName(name); err != nil {
		return fmt.Errorf("snapshot %w", err)
	}
	if strings.HasPrefix(name, HiddenSnapshotPrefix) {
		return fmt.Errorf("snapshot names starting %q are reserved: %w", HiddenSnapshotPrefix, ErrInvalid)
	}
	return nil
}

// CheckSourceSize refuses restoring a source into a smaller volume.
func CheckSourceSize(sizeBytes, sourceBytes int64, src Source) error {
	if sizeBytes < 0 {
		return fmt.Errorf("size %d must not be negative: %w", sizeBytes, ErrInvalid)
	}
	if sizeBytes > 0 && sizeBytes < sourceBytes {
		return fmt.Errorf("size %d is below the %d bytes of %s: %w", sizeBytes, sourceBytes, src, ErrOutOfRange)
	}
	return nil
}
