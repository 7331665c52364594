// Package backend is the storage the pillar agent carves volumes from: one
// small interface with a ZFS implementation (subpackage zfs) and an LVM one
// (subpackage lvm). Both drive the system's command-line tools through a
// Runner, so tests point them at the simulated tools of sim/storagetools
// and the qemu run points them at the real ones; backendtest holds the one
// suite every implementation passes.
//
// Errors carry their meaning as sentinels (ErrNotFound, ErrAlreadyExists,
// ErrResourceExhausted, ErrInvalid, ErrUnavailable, ErrInUse), so the gRPC
// layer picks status codes with errors.Is and never parses tool output.
package backend

import (
	"context"
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Kind is the type of a backend.
type Kind string

// Backend kinds, as named in the agent configuration.
const (
	KindZFS Kind = "zfs"
	KindLVM Kind = "lvm"
)

// Provisioning modes of LVM volumes.
const (
	ModeLinear = "linear"
	ModeThin   = "thin"
)

// Backend places volumes in one ZFS pool or LVM volume group. Operations
// are idempotent so a retried CSI call converges: creating an existing
// volume of a compatible size returns it, deleting a missing one succeeds.
type Backend interface {
	// Kind is KindZFS or KindLVM.
	Kind() Kind
	// Name is the pool or volume group name, the key volumes are routed by.
	Name() string
	// Layout is where this backend places volumes, as configured.
	Layout() Layout

	// Discover checks the pool or group and its layout exist and reports
	// health and capacity. Problems are reported in the Pool, not as errors.
	Discover(ctx context.Context) Pool
	// Capacity reports total and free bytes for volumes created with
	// params (for LVM the provisioning mode decides between the volume
	// group and the thin pool).
	Capacity(ctx context.Context, params map[string]string) (Capacity, error)

	// CreateVolume creates a volume of at least sizeBytes (rounded up as
	// the tools round, see the implementations). If the volume exists with
	// the size the request rounds to (and, for LVM, the same mode) it is
	// returned; any other existing volume is ErrAlreadyExists.
	CreateVolume(ctx context.Context, name string, sizeBytes int64, params map[string]string) (Volume, error)
	// GetVolume returns one volume or ErrNotFound.
	GetVolume(ctx context.Context, name string) (Volume, error)
	// ListVolumes returns this backend's volumes sorted by name.
	ListVolumes(ctx context.Context) ([]Volume, error)
	// ExpandVolume grows a volume to at least sizeBytes. A size at or below
	// the current one changes nothing and returns the volume: volumes
	// never shrink.
	ExpandVolume(ctx context.Context, name string, sizeBytes int64) (Volume, error)
	// DeleteVolume removes a volume; a missing volume is not an error.
	DeleteVolume(ctx context.Context, name string) error

	// DevicePath is the block device of a volume, the path an exporter
	// hands to the target. It is computed, not checked.
	DevicePath(name string) string

	// Snapshots and volumes with content (snapshot.go).
	Snapshotter
}

// Layout is a backend's placement inside its pool or group. The controller
// compares it with the store resource's spec.backend (S-AG-9): a mismatch
// keeps the store from being Ready rather than placing volumes elsewhere.
type Layout struct {
	// ParentDataset is the dataset under the pool zvols are created in,
	// relative to the pool; empty is the pool root. ZFS only.
	ParentDataset string
	// ThinPool is the thin pool of thin volumes; empty is none. LVM only.
	ThinPool string
}

// Volume is one volume of a backend.
type Volume struct {
	Name string
	// SizeBytes is the actual size, after the tools' rounding.
	SizeBytes int64
	// DevicePath is the block device to export.
	DevicePath string
	// Mode is ModeLinear or ModeThin for LVM volumes, empty for ZFS.
	Mode string
	// Native is the tools' own name: "pool/parent/vol" or "vg/lv".
	Native string
}

// Capacity is a placement's size in bytes.
type Capacity struct {
	TotalBytes int64
	FreeBytes  int64
	// ThinPool is set for an LVM thin pool, whose metadata area fills on
	// its own: when it is full every thin volume's writes fail, however
	// much data space is left. ThinMetadataUsed is its usage, 0 to 1.
	ThinPool         bool
	ThinMetadataUsed float64
}

// Pool is what Discover found.
type Pool struct {
	Name   string
	Kind   Kind
	Layout Layout
	// Discovered means the pool or group exists and holds the configured
	// layout (the parent dataset, the thin pool).
	Discovered bool
	// Healthy means Discovered, the tools report the pool healthy and its
	// capacity could be read.
	Healthy bool
	// Reason says why the pool is not Healthy; empty when it is.
	Reason string
	// Capacity is the capacity for the backend's default volumes, zero
	// when it could not be read.
	Capacity Capacity
}

// Set is the configured backends by name; names are unique across kinds
// (the configuration enforces it), so a volume's backend is found by name
// alone.
type Set map[string]Backend

// NewSet indexes backends by name, refusing duplicates.
func NewSet(backends ...Backend) (Set, error) {
	s := Set{}
	for _, b := range backends {
		if _, dup := s[b.Name()]; dup {
			return nil, fmt.Errorf("backend %q configured twice: %w", b.Name(), ErrInvalid)
		}
		s[b.Name()] = b
	}
	return s, nil
}

// Lookup returns the backend of a pool or group, or ErrNotFound.
func (s Set) Lookup(name string) (Backend, error) {
	b, ok := s[name]
	if !ok {
		return nil, fmt.Errorf("no backend for pool %q: %w", name, ErrNotFound)
	}
	return b, nil
}

// Names returns the backend names sorted.
func (s Set) Names() []string {
	names := make([]string, 0, len(s))
	for n := range s {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// volumeNameRE is the intersection of what ZFS dataset components and LVM
// volume names allow, so a name valid for one backend is valid for all.
var volumeNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*$`)

// MaxVolumeNameLen is LVM's limit on logical volume names.
const MaxVolumeNameLen = 127

// ValidateVolumeName refuses names no backend can hold, with ErrInvalid.
func ValidateVolumeName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("volume name is empty: %w", ErrInvalid)
	case len(name) > MaxVolumeNameLen:
		return fmt.Errorf("volume name %q is longer than %d characters: %w", name, MaxVolumeNameLen, ErrInvalid)
	case !volumeNameRE.MatchString(name):
		return fmt.Errorf("volume name %q must start with a letter or digit and contain only letters, digits, '_', '.' and '-': %w", name, ErrInvalid)
	}
	return nil
}

// ValidateSize refuses non-positive sizes with ErrInvalid.
func ValidateSize(sizeBytes int64) error {
	if sizeBytes <= 0 {
		return fmt.Errorf("size %d must be positive: %w", sizeBytes, ErrInvalid)
	}
	return nil
}

// RoundUp rounds n up to a multiple of unit.
func RoundUp(n, unit int64) int64 {
	if unit <= 0 {
		return n
	}
	return (n + unit - 1) / unit * unit
}

// FirstLine is the first non-empty line of tool output, for reasons.
func FirstLine(s string) string {
	for _, l := range strings.Split(s, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			return l
		}
	}
	return ""
}
