// Package lvm places volumes as logical volumes in an LVM volume group:
// linear volumes (lvcreate -L) or thin volumes in a thin pool
// (lvcreate -V --thinpool), through the LVM tools.
//
// Ownership: every LV the backend creates carries the tag TagOwned, and
// the backend lists, expands, exports and deletes only tagged LVs, so a
// volume group shared with other users keeps their LVs out of reach.
//
// Wiping: a linear LV is placed on extents a deleted volume may have
// written, and lvcreate zeroes only its first 4 KiB, so a new linear
// volume is zeroed whole (blkdiscard -z) before it is handed out; until
// that finishes it carries TagUnwiped, and a retried create finishes the
// job. Thin LVs read zeros without it (thin pools zero new chunks unless
// created with --zero n).
//
// Sizes: LVM allocates whole physical extents (4 MiB unless the volume
// group was created otherwise), for thin volumes too, so sizes are rounded
// up to the extent size before the tools see them; the reported size is
// the tools': what lvs reports, or for a new LV the size lvcreate made
// without rounding (see below).
//
// Tool calls: the extent size is read once (vgs) and kept, since a create
// or resize needs it and it changes only when an administrator runs
// vgchange -s or recreates the group; when lvcreate reports rounding a
// size up, or an existing LV's size disagrees, it is read again before
// anything is judged, and a refusal saying the group is gone drops it.
// Nothing else is kept: free space and existence are asked of the tools
// every time. A create runs lvcreate first, so lvcreate's own refusals
// (the name is taken, the space is short) are the answer rather than an
// earlier look, and a clean success is the whole answer: a thin volume
// is one tool call, a linear one three (lvcreate, blkdiscard, lvchange).
package lvm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/keylock"
)

// ParamProvisioningMode is the CreateVolume/Capacity parameter naming the
// mode, backend.ModeLinear or backend.ModeThin; without it the configured
// default applies.
const ParamProvisioningMode = "provisioningMode"

// LV tags of the backend's volumes.
const (
	// TagOwned marks an LV as a pillar-csi volume.
	TagOwned = "pillar-csi"
	// TagUnwiped marks a linear LV whose zeroing has not finished.
	TagUnwiped = "pillar-csi-unwiped"
)

// Config places a backend.
type Config struct {
	VolumeGroup string
	// ThinPool is the thin pool thin volumes are created in; empty allows
	// linear volumes only.
	ThinPool string
	// ProvisioningMode is the mode for requests naming none ("linear" when
	// empty).
	ProvisioningMode string
	// DeviceRoot stands for /dev when computing device paths ("/dev" when
	// empty).
	DeviceRoot string
	// OverprovisionRatio, when above zero, makes the thin pool's capacity
	// a budget of virtual sizes (agentconfig.LVM.OverprovisionRatio).
	OverprovisionRatio float64
}

// Backend is the LVM implementation of backend.Backend.
type Backend struct {
	cfg Config
	run backend.Runner
	// creating serialises creates of one name in this process: the
	// losers of a race must not zero the LV beside the winner (blkdiscard
	// opens the device exclusively, so the second one fails EBUSY).
	creating keylock.Set
	// extentSize is the volume group's extent size as vgs last reported
	// it, 0 before the first report or after a refusal that says the
	// group is gone.
	extentSize atomic.Int64
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend for one volume group.
func New(cfg Config, run backend.Runner) *Backend {
	if cfg.DeviceRoot == "" {
		cfg.DeviceRoot = "/dev"
	}
	if cfg.ProvisioningMode == "" {
		cfg.ProvisioningMode = backend.ModeLinear
	}
	if cfg.DeviceRoot == "/dev" {
		// The real tools on a real node (the simulator has no fabrics).
		run = fabricsFilter{run: run, sysfs: "/sys"}
	}
	return &Backend{cfg: cfg, run: run}
}

func (b *Backend) Kind() backend.Kind { return backend.KindLVM }
func (b *Backend) Name() string       { return b.cfg.VolumeGroup }

// DefaultProvisioningMode is the mode of requests naming none.
func (b *Backend) DefaultProvisioningMode() string { return b.cfg.ProvisioningMode }

func (b *Backend) Layout() backend.Layout { return backend.Layout{ThinPool: b.cfg.ThinPool} }

// DevicePath is /dev/<vg>/<lv>, the link udev makes for an active LV.
func (b *Backend) DevicePath(name string) string {
	return filepath.Join(b.cfg.DeviceRoot, b.cfg.VolumeGroup, name)
}

// reportArgs asks lvs/vgs for exact byte sizes in JSON.
var reportArgs = []string{"--reportformat", "json", "--units", "b", "--nosuffix"}

type report struct {
	Report []struct {
		LV []map[string]string `json:"lv"`
		VG []map[string]string `json:"vg"`
	} `json:"report"`
}

func parseReport(out []byte, kind string) ([]map[string]string, error) {
	var r report
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("lvm: unreadable %ss report: %w", kind, err)
	}
	var rows []map[string]string
	for _, part := range r.Report {
		if kind == "lv" {
			rows = append(rows, part.LV...)
		} else {
			rows = append(rows, part.VG...)
		}
	}
	return rows, nil
}

// parseBytes reads a --units b value, with or without its "B" suffix.
func parseBytes(field, v string) (int64, error) {
	n, err := strconv.ParseInt(strings.TrimSuffix(v, "B"), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("lvm: %s %q is not a byte count", field, v)
	}
	return n, nil
}

// lv is one logical volume as lvs reports it.
type lv struct {
	name string
	size int64
	attr string
	pool string
	tags []string
}

func (l lv) tagged(tag string) bool {
	for _, t := range l.tags {
		if t == tag {
			return true
		}
	}
	return false
}

// owned says the LV is one of this driver's volumes.
func (l lv) owned() bool { return l.tagged(TagOwned) }

// mode is the volume's provisioning mode, "" for LVs that are not volumes
// (thin pools, snapshots, …).
func (l lv) mode() string {
	if l.attr == "" {
		return ""
	}
	switch l.attr[0] {
	case '-':
		return backend.ModeLinear
	case 'V':
		return backend.ModeThin
	}
	return ""
}

const lvColumns = "lv_name,lv_size,lv_attr,pool_lv,lv_tags"

func parseLVs(out []byte) ([]lv, error) {
	rows, err := parseReport(out, "lv")
	if err != nil {
		return nil, err
	}
	lvs := make([]lv, 0, len(rows))
	for _, r := range rows {
		size, err := parseBytes("lv_size", r["lv_size"])
		if err != nil {
			return nil, err
		}
		var tags []string
		if t := r["lv_tags"]; t != "" {
			tags = strings.Split(t, ",")
		}
		lvs = append(lvs, lv{name: r["lv_name"], size: size, attr: r["lv_attr"], pool: r["pool_lv"], tags: tags})
	}
	return lvs, nil
}

// classify gives a failed LVM run its meaning.
func classify(err error) error {
	var ce *backend.CommandError
	if !errors.As(err, &ce) {
		return err
	}
	if ce.DidNotRun() {
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	s := ce.Stderr
	switch {
	case strings.Contains(s, "insufficient free space"), strings.Contains(s, "Insufficient free space"):
		return fmt.Errorf("%w: %w", backend.ErrResourceExhausted, err)
	case strings.Contains(s, "already exists in volume group"):
		return fmt.Errorf("%w: %w", backend.ErrAlreadyExists, err)
	case strings.Contains(s, "Failed to find logical volume"):
		return fmt.Errorf("%w: %w", backend.ErrNotFound, err)
	case strings.Contains(s, " in use"):
		return fmt.Errorf("%w: %w", backend.ErrInUse, err)
	case deviceProblem(s), strings.Contains(s, "Volume group \""), strings.Contains(s, "not found in Volume group"),
		strings.Contains(s, "is not a thin pool"):
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	case strings.Contains(s, "is invalid"), strings.Contains(s, "are reserved"), strings.Contains(s, "Invalid argument"):
		return fmt.Errorf("%w: %w", backend.ErrInvalid, err)
	}
	return err
}

// deviceProblem recognises LVM failing to open device-mapper or the disks,
// as in a container whose device allowlist denies them.
func deviceProblem(stderr string) bool {
	return strings.Contains(stderr, "Operation not permitted") || strings.Contains(stderr, "Permission denied") ||
		strings.Contains(stderr, "Failure to communicate with kernel device-mapper")
}

// vgMissing recognises "Volume group "x" not found".
func vgMissing(stderr string) bool {
	return strings.Contains(stderr, "Volume group \"") && strings.Contains(stderr, "not found")
}

// get reads one LV; found is false when lvs cannot find it in an existing VG.
func (b *Backend) get(ctx context.Context, name string) (lv, bool, error) {
	args := append(append([]string{}, reportArgs...), "-o", lvColumns, b.cfg.VolumeGroup+"/"+name)
	out, err := b.run.Run(ctx, "lvs", args...)
	if err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return lv{}, false, nil
		}
		return lv{}, false, fmt.Errorf("lvm: %s/%s: %w", b.cfg.VolumeGroup, name, err)
	}
	lvs, err := parseLVs(out)
	if err != nil {
		return lv{}, false, err
	}
	if len(lvs) != 1 || lvs[0].name != name {
		return lv{}, false, fmt.Errorf("lvm: lvs %s/%s: unexpected output %q", b.cfg.VolumeGroup, name, out)
	}
	return lvs[0], true, nil
}

type vgInfo struct {
	size, free, extentSize int64
}

func (b *Backend) vg(ctx context.Context) (vgInfo, error) {
	args := append(append([]string{}, reportArgs...), "-o", "vg_name,vg_size,vg_free,vg_extent_size", b.cfg.VolumeGroup)
	out, err := b.run.Run(ctx, "vgs", args...)
	if err != nil {
		return vgInfo{}, fmt.Errorf("lvm: volume group %s: %w", b.cfg.VolumeGroup, classify(err))
	}
	rows, err := parseReport(out, "vg")
	if err != nil {
		return vgInfo{}, err
	}
	if len(rows) != 1 || rows[0]["vg_name"] != b.cfg.VolumeGroup {
		return vgInfo{}, fmt.Errorf("lvm: vgs %s: unexpected output %q", b.cfg.VolumeGroup, out)
	}
	var v vgInfo
	var errs [3]error
	v.size, errs[0] = parseBytes("vg_size", rows[0]["vg_size"])
	v.free, errs[1] = parseBytes("vg_free", rows[0]["vg_free"])
	v.extentSize, errs[2] = parseBytes("vg_extent_size", rows[0]["vg_extent_size"])
	if err := errors.Join(errs[:]...); err != nil {
		return vgInfo{}, err
	}
	if v.extentSize <= 0 {
		return vgInfo{}, fmt.Errorf("lvm: vgs %s: extent size %d", b.cfg.VolumeGroup, v.extentSize)
	}
	b.extentSize.Store(v.extentSize)
	return v, nil
}

// extent is the volume group's extent size, read with vgs only when no
// report is kept.
func (b *Backend) extent(ctx context.Context) (int64, error) {
	if e := b.extentSize.Load(); e > 0 {
		return e, nil
	}
	vg, err := b.vg(ctx)
	return vg.extentSize, err
}

// forget drops the kept extent size after a refusal that may mean the
// volume group was removed (and may come back with another extent size).
func (b *Backend) forget(err error) {
	if errors.Is(err, backend.ErrUnavailable) {
		b.extentSize.Store(0)
	}
}

// resolveMode picks the provisioning mode of a request and checks the
// backend can serve it.
func (b *Backend) resolveMode(params map[string]string) (string, error) {
	mode := b.cfg.ProvisioningMode
	for k, v := range params {
		if k != ParamProvisioningMode {
			return "", fmt.Errorf("lvm: unknown volume parameter %q (only %s): %w", k, ParamProvisioningMode, backend.ErrInvalid)
		}
		mode = v
	}
	switch mode {
	case backend.ModeLinear:
	case backend.ModeThin:
		if b.cfg.ThinPool == "" {
			return "", fmt.Errorf("lvm: thin volumes need a thinPool, and volume group %s has none configured: %w", b.cfg.VolumeGroup, backend.ErrInvalid)
		}
	default:
		return "", fmt.Errorf("lvm: provisioning mode %q is not %q or %q: %w", mode, backend.ModeLinear, backend.ModeThin, backend.ErrInvalid)
	}
	return mode, nil
}

func (b *Backend) volume(l lv) backend.Volume {
	return backend.Volume{Name: l.name, SizeBytes: l.size, DevicePath: b.DevicePath(l.name), Mode: l.mode(), Native: b.cfg.VolumeGroup + "/" + l.name}
}

// checkLVName adds LVM's reserved names to the common volume name rules,
// so they fail as invalid requests before reaching lvcreate.
func checkLVName(name string) error {
	if err := backend.ValidateVolumeName(name); err != nil {
		return err
	}
	for _, p := range []string{"snapshot", "pvmove"} {
		if strings.HasPrefix(name, p) {
			return fmt.Errorf("lvm: volume names starting %q are reserved: %w", p, backend.ErrInvalid)
		}
	}
	if i := strings.IndexByte(name, '_'); i >= 0 {
		for _, f := range []string{"_cdata", "_cmeta", "_corig", "_cpool", "_cvol", "_wcorig", "_mimage", "_mlog", "_rimage", "_rmeta", "_tdata", "_tmeta", "_vdata", "_imeta", "_iorig", "_pmspare", "_vorigin"} {
			if strings.Contains(name[i:], f) {
				return fmt.Errorf("lvm: volume names including %q are reserved: %w", f, backend.ErrInvalid)
			}
		}
	}
	return nil
}

// CreateVolume creates a linear or thin LV, by the provisioningMode
// parameter or the configured default.
func (b *Backend) CreateVolume(ctx context.Context, name string, sizeBytes int64, params map[string]string) (backend.Volume, error) {
	if err := errors.Join(checkLVName(name), backend.ValidateSize(sizeBytes)); err != nil {
		return backend.Volume{}, err
	}
	mode, err := b.resolveMode(params)
	if err != nil {
		return backend.Volume{}, err
	}
	defer b.creating.Lock(name)()
	extent, err := b.extent(ctx)
	if err != nil {
		return backend.Volume{}, err
	}
	size := backend.RoundUp(sizeBytes, extent)
	// lvcreate first: it refuses a taken name before it looks at free
	// space, so a retry of a create that succeeded finds its volume below
	// however full the group is, and a short group is refused by the tool
	// itself, never by an older reading of it.
	var args []string
	if mode == backend.ModeThin {
		args = []string{"-y", "-n", name, "-V", strconv.FormatInt(size, 10) + "b", "--thinpool", b.cfg.ThinPool, "--addtag", TagOwned, b.cfg.VolumeGroup}
	} else {
		args = []string{"-y", "-n", name, "-L", strconv.FormatInt(size, 10) + "b", "--addtag", TagOwned, "--addtag", TagUnwiped, b.cfg.VolumeGroup}
	}
	out, err := b.run.Run(ctx, "lvcreate", args...)
	switch {
	case err == nil && !strings.Contains(string(out), "Rounding up"):
		// lvcreate made exactly what it was asked: this name, these tags,
		// in this mode and pool, and size bytes (it says so on standard
		// output when it rounds a size up to whole extents, which a stale
		// extent size would make it do: LVM 2.03 "Rounding up size to full
		// physical extent"), so reading the LV back would tell nothing new.
		v := backend.Volume{Name: name, SizeBytes: size, DevicePath: b.DevicePath(name), Mode: mode, Native: b.cfg.VolumeGroup + "/" + name}
		if mode == backend.ModeLinear {
			if err := b.zero(ctx, v); err != nil {
				return backend.Volume{}, err
			}
		}
		return v, nil
	case err != nil:
		err = classify(err)
		if !errors.Is(err, backend.ErrAlreadyExists) {
			b.forget(err)
			return backend.Volume{}, fmt.Errorf("lvm: create %s/%s: %w", b.cfg.VolumeGroup, name, err)
		}
		// The name is taken: a retry, a concurrent create of the same
		// name, or someone else's LV; finish tells them apart.
	}
	l, found, err := b.get(ctx, name)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found {
		return backend.Volume{}, fmt.Errorf("lvm: %s/%s vanished after create", b.cfg.VolumeGroup, name)
	}
	if l.size != size {
		// Either a volume of another size, or the kept extent size is
		// stale (vgchange -s, or the group recreated): ask vgs again
		// before calling it a conflict.
		vg, err := b.vg(ctx)
		if err != nil {
			return backend.Volume{}, err
		}
		size = backend.RoundUp(sizeBytes, vg.extentSize)
	}
	return b.finish(ctx, l, size, mode)
}

// finish checks an existing or new LV against the request and completes
// its zeroing when that has not finished.
func (b *Backend) finish(ctx context.Context, l lv, size int64, mode string) (backend.Volume, error) {
	if !l.owned() {
		return backend.Volume{}, b.notOwned(l.name)
	}
	v, err := b.compatible(l, size, mode)
	if err != nil || !l.tagged(TagUnwiped) {
		return v, err
	}
	if err := b.zero(ctx, v); err != nil {
		return backend.Volume{}, err
	}
	return v, nil
}

// zero zeroes a new linear volume whole, then drops its TagUnwiped.
func (b *Backend) zero(ctx context.Context, v backend.Volume) error {
	// The zeroing runs to its end even when the caller gives up: a retry
	// waits for it (the agent serialises calls per volume) instead of
	// starting over.
	wctx := context.WithoutCancel(ctx)
	if _, err := b.run.Run(wctx, "blkdiscard", "-z", v.DevicePath); err != nil {
		return fmt.Errorf("lvm: zero %s before first use: %w", v.Native, classify(err))
	}
	if _, err := b.run.Run(wctx, "lvchange", "--deltag", TagUnwiped, v.Native); err != nil {
		return fmt.Errorf("lvm: mark %s zeroed: %w", v.Native, classify(err))
	}
	return nil
}

// notOwned is the refusal to touch an LV the driver did not create.
func (b *Backend) notOwned(name string) error {
	native := b.cfg.VolumeGroup + "/" + name
	return fmt.Errorf("lvm: %s exists without the %q tag, so pillar-csi leaves it alone (a volume an earlier pillar-csi version created is adopted with `lvchange --addtag %s %s`): %w",
		native, TagOwned, TagOwned, native, backend.ErrNotOwned)
}
func (b *Backend) compatible(l lv, size int64, mode string) (backend.Volume, error) {
	native := b.cfg.VolumeGroup + "/" + l.name
	switch got := l.mode(); {
	case got == "":
		return backend.Volume{}, fmt.Errorf("lvm: %s exists and is not a volume (attributes %s): %w", native, l.attr, backend.ErrAlreadyExists)
	case l.snapshot():
		return backend.Volume{}, fmt.Errorf("lvm: %s exists and is a snapshot: %w", native, backend.ErrAlreadyExists)
	case got != mode:
		return backend.Volume{}, fmt.Errorf("lvm: volume %s exists as %s, request is %s: %w", native, got, mode, backend.ErrAlreadyExists)
	case mode == backend.ModeThin && l.pool != b.cfg.ThinPool:
		return backend.Volume{}, fmt.Errorf("lvm: volume %s exists in thin pool %q, not %q: %w", native, l.pool, b.cfg.ThinPool, backend.ErrAlreadyExists)
	case l.size != size:
		return backend.Volume{}, fmt.Errorf("lvm: volume %s exists with %d bytes, request needs %d: %w", native, l.size, size, backend.ErrAlreadyExists)
	}
	return b.volume(l), nil
}

// missing tells a missing volume from a missing volume group.
func (b *Backend) missing(ctx context.Context, name string) error {
	if _, err := b.vg(ctx); err != nil {
		return err
	}
	return fmt.Errorf("lvm: volume %s/%s: %w", b.cfg.VolumeGroup, name, backend.ErrNotFound)
}

func (b *Backend) GetVolume(ctx context.Context, name string) (backend.Volume, error) {
	if err := backend.ValidateVolumeName(name); err != nil {
		return backend.Volume{}, err
	}
	l, found, err := b.get(ctx, name)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found || l.mode() == "" || l.snapshot() {
		return backend.Volume{}, b.missing(ctx, name)
	}
	if !l.owned() {
		return backend.Volume{}, fmt.Errorf("%w (%w)", b.notOwned(name), backend.ErrNotFound)
	}
	return b.volume(l), nil
}

func (b *Backend) ListVolumes(ctx context.Context) ([]backend.Volume, error) {
	args := append(append([]string{}, reportArgs...), "-o", lvColumns, b.cfg.VolumeGroup)
	out, err := b.run.Run(ctx, "lvs", args...)
	if err != nil {
		return nil, fmt.Errorf("lvm: list %s: %w", b.cfg.VolumeGroup, classify(err))
	}
	lvs, err := parseLVs(out)
	if err != nil {
		return nil, err
	}
	list := []backend.Volume{}
	for _, l := range lvs {
		if l.mode() != "" && l.owned() && !l.snapshot() {
			list = append(list, b.volume(l))
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

func (b *Backend) ExpandVolume(ctx context.Context, name string, sizeBytes int64) (backend.Volume, error) {
	if err := errors.Join(backend.ValidateVolumeName(name), backend.ValidateSize(sizeBytes)); err != nil {
		return backend.Volume{}, err
	}
	l, found, err := b.get(ctx, name)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found || l.mode() == "" || l.snapshot() {
		return backend.Volume{}, b.missing(ctx, name)
	}
	if !l.owned() {
		return backend.Volume{}, b.notOwned(name)
	}
	// A stale extent size cannot mislead this: the LV's size is a
	// multiple of the true extent size, so "already large enough" is
	// decided the same with either, and lvextend rounds a larger target
	// up itself (the size reported is read back).
	extent, err := b.extent(ctx)
	if err != nil {
		return backend.Volume{}, err
	}
	target := backend.RoundUp(sizeBytes, extent)
	if target <= l.size {
		return b.volume(l), nil
	}
	lvPath := b.cfg.VolumeGroup + "/" + name
	if _, err := b.run.Run(ctx, "lvextend", "-L", strconv.FormatInt(target, 10)+"b", lvPath); err != nil {
		err = classify(err)
		b.forget(err)
		return backend.Volume{}, fmt.Errorf("lvm: expand %s: %w", lvPath, err)
	}
	l, found, err = b.get(ctx, name)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found {
		return backend.Volume{}, fmt.Errorf("lvm: %s vanished after resize", lvPath)
	}
	return b.volume(l), nil
}

func (b *Backend) DeleteVolume(ctx context.Context, name string) error {
	if err := backend.ValidateVolumeName(name); err != nil {
		return err
	}
	l, found, err := b.get(ctx, name)
	if err != nil {
		return err
	}
	if !found {
		return nil
	}
	lvPath := b.cfg.VolumeGroup + "/" + name
	if l.mode() == "" {
		// Never remove the thin pool (and with it every thin volume).
		return fmt.Errorf("lvm: %s is not a volume (attributes %s); refusing to remove it: %w", lvPath, l.attr, backend.ErrInvalid)
	}
	if !l.owned() {
		return b.notOwned(name)
	}
	if l.snapshot() {
		return fmt.Errorf("lvm: %s is a snapshot, not a volume; refusing to remove it: %w", lvPath, backend.ErrInvalid)
	}
	if _, err := b.run.Run(ctx, "lvremove", "-y", lvPath); err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("lvm: remove %s: %w", lvPath, err)
	}
	return nil
}

// Capacity is the volume group's size and free space for linear volumes,
// and the thin pool's size and unwritten space for thin volumes (thin
// volumes may promise more than that: thin pools overcommit).
func (b *Backend) Capacity(ctx context.Context, params map[string]string) (backend.Capacity, error) {
	mode, err := b.resolveMode(params)
	if err != nil {
		return backend.Capacity{}, err
	}
	if mode == backend.ModeLinear {
		vg, err := b.vg(ctx)
		if err != nil {
			return backend.Capacity{}, err
		}
		return backend.Capacity{TotalBytes: vg.size, FreeBytes: vg.free}, nil
	}
	pool, err := b.thinPool(ctx)
	if err != nil {
		return backend.Capacity{}, err
	}
	return pool, nil
}

// thinPool reads the configured thin pool's size and data usage.
func (b *Backend) thinPool(ctx context.Context) (backend.Capacity, error) {
	tp := b.cfg.VolumeGroup + "/" + b.cfg.ThinPool
	args := append(append([]string{}, reportArgs...), "-o", "lv_name,lv_size,lv_attr,data_percent,metadata_percent", tp)
	out, err := b.run.Run(ctx, "lvs", args...)
	if err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return backend.Capacity{}, &layoutError{fmt.Sprintf("thin pool %s does not exist", tp)}
		}
		return backend.Capacity{}, fmt.Errorf("lvm: %w", err)
	}
	rows, err := parseReport(out, "lv")
	if err != nil {
		return backend.Capacity{}, err
	}
	if len(rows) != 1 {
		return backend.Capacity{}, fmt.Errorf("lvm: lvs %s: unexpected output %q", tp, out)
	}
	if attr := rows[0]["lv_attr"]; !strings.HasPrefix(attr, "t") {
		return backend.Capacity{}, &layoutError{fmt.Sprintf("%s is not a thin pool (attributes %s)", tp, attr)}
	}
	size, err := parseBytes("lv_size", rows[0]["lv_size"])
	if err != nil {
		return backend.Capacity{}, err
	}
	pct := 0.0
	if v := rows[0]["data_percent"]; v != "" {
		if pct, err = strconv.ParseFloat(v, 64); err != nil {
			return backend.Capacity{}, fmt.Errorf("lvm: data_percent %q of %s: %w", v, tp, err)
		}
	}
	meta := 0.0
	if v := rows[0]["metadata_percent"]; v != "" {
		if meta, err = strconv.ParseFloat(v, 64); err != nil {
			return backend.Capacity{}, fmt.Errorf("lvm: metadata_percent %q of %s: %w", v, tp, err)
		}
	}
	used := int64(float64(size) * pct / 100)
	c := backend.Capacity{TotalBytes: size, FreeBytes: max(0, size-used), ThinPool: true, ThinMetadataUsed: meta / 100}
	if b.cfg.OverprovisionRatio > 0 {
		return b.thinBudget(ctx, c)
	}
	return c, nil
}

// thinBudget is a thin pool's capacity as a budget of virtual sizes: the
// pool's size times the overprovision ratio, less the sizes of the thin
// volumes (and snapshots) in it. Free data space alone says nothing about
// what was promised: a thin volume takes none until written, so without
// the budget a scheduler tracking capacity would admit claims without end.
func (b *Backend) thinBudget(ctx context.Context, c backend.Capacity) (backend.Capacity, error) {
	args := append(append([]string{}, reportArgs...), "-o", "lv_name,lv_size,pool_lv", b.cfg.VolumeGroup)
	out, err := b.run.Run(ctx, "lvs", args...)
	if err != nil {
		return backend.Capacity{}, fmt.Errorf("lvm: %w", classify(err))
	}
	rows, err := parseReport(out, "lv")
	if err != nil {
		return backend.Capacity{}, err
	}
	var promised int64
	for _, r := range rows {
		if r["pool_lv"] != b.cfg.ThinPool {
			continue
		}
		n, err := parseBytes("lv_size", r["lv_size"])
		if err != nil {
			return backend.Capacity{}, err
		}
		promised += n
	}
	c.TotalBytes = int64(float64(c.TotalBytes) * b.cfg.OverprovisionRatio)
	c.FreeBytes = max(0, c.TotalBytes-promised)
	return c, nil
}

// Discover checks the volume group and, when configured, the thin pool,
// and reports the capacity of the default mode from those same two
// reports (vgs, and lvs of the thin pool), read fresh every time.
func (b *Backend) Discover(ctx context.Context) backend.Pool {
	p := backend.Pool{Name: b.cfg.VolumeGroup, Kind: backend.KindLVM, Layout: b.Layout()}
	vg, err := b.vg(ctx)
	if err != nil {
		p.Reason = b.reason(err)
		return p
	}
	var pool backend.Capacity
	if b.cfg.ThinPool != "" {
		if pool, err = b.thinPool(ctx); err != nil {
			p.Reason = b.reason(err)
			return p
		}
	}
	p.Discovered = true
	mode, err := b.resolveMode(nil)
	if err != nil {
		p.Reason = b.reason(err)
		return p
	}
	c := backend.Capacity{TotalBytes: vg.size, FreeBytes: vg.free, ThinPool: pool.ThinPool, ThinMetadataUsed: pool.ThinMetadataUsed}
	if mode == backend.ModeThin {
		c = pool
	}
	p.Capacity, p.Healthy = c, true
	return p
}

// layoutError is a configured thin pool that is missing or is not a thin
// pool; its message is the discovery reason as is.
type layoutError struct{ msg string }

func (e *layoutError) Error() string { return "lvm: " + e.msg + ": " + backend.ErrUnavailable.Error() }
func (e *layoutError) Unwrap() error { return backend.ErrUnavailable }

func (b *Backend) reason(err error) string {
	var le *layoutError
	if errors.As(err, &le) {
		return le.msg
	}
	var ce *backend.CommandError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	switch {
	case ce.DidNotRun():
		return fmt.Sprintf("cannot run %s: %v", ce.Name, ce.Err)
	case deviceProblem(ce.Stderr):
		return fmt.Sprintf("cannot open device-mapper or the disks (is the agent privileged?): %s", backend.FirstLine(ce.Stderr))
	case vgMissing(ce.Stderr):
		return fmt.Sprintf("volume group %s not found: %s", b.cfg.VolumeGroup, backend.FirstLine(ce.Stderr))
	}
	return ce.Error()
}
