// Package zfs places volumes as zvols in a ZFS pool, at
// <pool>[/<parentDataset>]/<volume>, through the zfs and zpool tools.
//
// Sizes: zfs create rounds a volume's size up to its volblocksize (16 KiB by
// default in OpenZFS 2.2+, 8 KiB before; settable per volume with the
// volblocksize parameter), and a new size must be a multiple of it, so
// ExpandVolume rounds up the same way. The reported size is always what zfs
// reports afterwards.
package zfs

import (
	"context"
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// Config places a backend.
type Config struct {
	Pool string
	// ParentDataset is relative to the pool; empty is the pool root.
	ParentDataset string
	// DeviceRoot stands for /dev when computing device paths ("/dev" when
	// empty); the simulator keeps its backing files under another root.
	DeviceRoot string
}

// Backend is the ZFS implementation of backend.Backend.
type Backend struct {
	cfg Config
	run backend.Runner
	// busyWait bounds how long a destroy waits out "dataset is busy":
	// right after its last writer closes a zvol, udev's probe of the
	// device (or an initiator's last close after an unexport) holds it
	// open for a moment. Past it the busy error is returned (FailedPrecondition).
	busyWait time.Duration
	sleep    func(context.Context, time.Duration) error
}

const defaultBusyWait = 10 * time.Second

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

var _ backend.Backend = (*Backend)(nil)

// New returns a backend for one pool.
func New(cfg Config, run backend.Runner) *Backend {
	if cfg.DeviceRoot == "" {
		cfg.DeviceRoot = "/dev"
	}
	return &Backend{cfg: cfg, run: run, busyWait: defaultBusyWait, sleep: sleepCtx}
}

func (b *Backend) Kind() backend.Kind { return backend.KindZFS }
func (b *Backend) Name() string       { return b.cfg.Pool }

func (b *Backend) Layout() backend.Layout {
	return backend.Layout{ParentDataset: b.cfg.ParentDataset}
}

// root is the dataset volumes are created in.
func (b *Backend) root() string {
	if b.cfg.ParentDataset == "" {
		return b.cfg.Pool
	}
	return b.cfg.Pool + "/" + b.cfg.ParentDataset
}

func (b *Backend) dataset(name string) string { return b.root() + "/" + name }

// DevicePath is /dev/zvol/<dataset>, the link udev makes for a zvol.
func (b *Backend) DevicePath(name string) string {
	return filepath.Join(b.cfg.DeviceRoot, "zvol", filepath.FromSlash(b.dataset(name)))
}

func (b *Backend) volume(info zvol) backend.Volume {
	name := path.Base(info.name)
	return backend.Volume{Name: name, SizeBytes: info.volsize, DevicePath: b.DevicePath(name), Native: info.name}
}

// zvol is one line of `zfs list -Hp -o name,type,volsize,volblocksize`.
type zvol struct {
	name         string
	dsType       string
	volsize      int64
	volblocksize int64
}

const zvolColumns = "name,type,volsize,volblocksize"

func parseZvols(out []byte) ([]zvol, error) {
	var vols []zvol
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return nil, fmt.Errorf("zfs list: unexpected line %q", line)
		}
		v := zvol{name: f[0], dsType: f[1]}
		if v.dsType == "volume" {
			var err1, err2 error
			v.volsize, err1 = strconv.ParseInt(f[2], 10, 64)
			v.volblocksize, err2 = strconv.ParseInt(f[3], 10, 64)
			if err := errors.Join(err1, err2); err != nil {
				return nil, fmt.Errorf("zfs list: unexpected line %q: %w", line, err)
			}
		}
		vols = append(vols, v)
	}
	return vols, nil
}

// classify gives a failed zfs/zpool run its meaning.
// transientBusy tells "dataset is busy" (an open device, which passes)
// from a volume's dependents (snapshots, clones), which waiting cannot end.
func transientBusy(err error) bool {
	var ce *backend.CommandError
	return errors.As(err, &ce) && strings.Contains(ce.Stderr, "is busy")
}

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
	case strings.Contains(s, "out of space"), strings.Contains(s, "greater than available space"):
		return fmt.Errorf("%w: %w", backend.ErrResourceExhausted, err)
	case strings.Contains(s, "dataset already exists"):
		return fmt.Errorf("%w: %w", backend.ErrAlreadyExists, err)
	case strings.Contains(s, "dataset is busy"), strings.Contains(s, "pool or dataset is busy"),
		// Snapshots: a volume with snapshots, a snapshot with clones.
		strings.Contains(s, "has children"), strings.Contains(s, "has dependent clones"),
		strings.Contains(s, "snapshot is cloned"):
		return fmt.Errorf("%w: %w", backend.ErrInUse, err)
	case strings.Contains(s, "dataset does not exist"), strings.Contains(s, "could not find any snapshots to destroy"):
		return fmt.Errorf("%w: %w", backend.ErrNotFound, err)
	case strings.Contains(s, "no such pool"), strings.Contains(s, "parent does not exist"),
		strings.Contains(s, "pool I/O is currently suspended"), deviceProblem(s):
		return fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	case strings.Contains(s, "invalid property"), strings.Contains(s, "must be one of"),
		strings.Contains(s, "must be power of 2"), strings.Contains(s, "must be a multiple of"),
		strings.Contains(s, "bad numeric value"), strings.Contains(s, "bad volume size"),
		strings.Contains(s, "does not apply to datasets"), strings.Contains(s, "is readonly"):
		return fmt.Errorf("%w: %w", backend.ErrInvalid, err)
	}
	return err
}

// deviceProblem recognises libzfs failing to open /dev/zfs: no privilege,
// no device node, or no kernel module.
func deviceProblem(stderr string) bool {
	return strings.Contains(stderr, "must be run as root") || strings.Contains(stderr, "/dev/zfs") ||
		strings.Contains(stderr, "ZFS modules") || strings.Contains(stderr, "Permission denied")
}

// get reads one dataset; found is false when zfs says it does not exist.
func (b *Backend) get(ctx context.Context, ds string) (v zvol, found bool, err error) {
	out, err := b.run.Run(ctx, "zfs", "list", "-Hp", "-o", zvolColumns, ds)
	if err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return zvol{}, false, nil
		}
		return zvol{}, false, err
	}
	vols, err := parseZvols(out)
	if err != nil {
		return zvol{}, false, err
	}
	if len(vols) != 1 || vols[0].name != ds {
		return zvol{}, false, fmt.Errorf("zfs list %s: unexpected output %q", ds, out)
	}
	return vols[0], true, nil
}

// missing turns "volume not found" into ErrUnavailable when the reason is
// that the placement itself is gone, so callers retry instead of giving up.
func (b *Backend) missing(ctx context.Context, name string) error {
	if _, found, err := b.get(ctx, b.root()); err != nil {
		return err
	} else if !found {
		return fmt.Errorf("zfs: dataset %s does not exist: %w", b.root(), backend.ErrUnavailable)
	}
	return fmt.Errorf("zfs: volume %s: %w", b.dataset(name), backend.ErrNotFound)
}

// Params of CreateVolume are ZFS properties set on the zvol with -o.
// These are refused because the request or the layout already decides them.
var reservedParams = map[string]bool{"volsize": true, "name": true, "type": true, "mountpoint": true}

var propNameRE = regexp.MustCompile(`^([a-z][a-z0-9_]*|[a-z0-9_.-]+:[a-z0-9_.:-]+)$`)

func checkParams(params map[string]string) error {
	for k, v := range params {
		switch {
		case !propNameRE.MatchString(k):
			return fmt.Errorf("zfs: %q is not a ZFS property name: %w", k, backend.ErrInvalid)
		case reservedParams[k]:
			return fmt.Errorf("zfs: property %q cannot be set per volume here: %w", k, backend.ErrInvalid)
		case v == "" || strings.ContainsAny(v, "\n\x00"):
			return fmt.Errorf("zfs: property %q has an empty or multi-line value: %w", k, backend.ErrInvalid)
		}
	}
	return nil
}

// CreateVolume creates a zvol; params are set as ZFS properties
// (volblocksize, compression, refreservation=none for a sparse volume, …).
func (b *Backend) CreateVolume(ctx context.Context, name string, sizeBytes int64, params map[string]string) (backend.Volume, error) {
	if err := errors.Join(backend.ValidateVolumeName(name), backend.ValidateSize(sizeBytes), checkParams(params)); err != nil {
		return backend.Volume{}, err
	}
	ds := b.dataset(name)
	// zfs create first: it refuses a taken name before it looks at free
	// space, so a retried create finds its volume below however full the
	// pool is, and a short pool is refused by zfs itself, never by an
	// earlier reading of it.
	args := []string{"create", "-V", strconv.FormatInt(sizeBytes, 10)}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		args = append(args, "-o", k+"="+params[k])
	}
	args = append(args, ds)
	if _, err := b.run.Run(ctx, "zfs", args...); err != nil {
		err = classify(err)
		if !errors.Is(err, backend.ErrAlreadyExists) {
			return backend.Volume{}, fmt.Errorf("zfs: create %s: %w", ds, err)
		}
		// The name is taken: a retry, a concurrent create of the same
		// name, or another dataset; compatible tells them apart.
	}
	created, found, err := b.get(ctx, ds)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found {
		return backend.Volume{}, fmt.Errorf("zfs: %s vanished after create", ds)
	}
	return b.compatible(created, sizeBytes)
}

// compatible returns an existing volume if a request for sizeBytes would
// have produced it.
func (b *Backend) compatible(v zvol, sizeBytes int64) (backend.Volume, error) {
	if v.dsType != "volume" {
		return backend.Volume{}, fmt.Errorf("zfs: %s exists and is a %s, not a volume: %w", v.name, v.dsType, backend.ErrAlreadyExists)
	}
	if want := backend.RoundUp(sizeBytes, v.volblocksize); want != v.volsize {
		return backend.Volume{}, fmt.Errorf("zfs: volume %s exists with %d bytes, request for %d bytes needs %d: %w", v.name, v.volsize, sizeBytes, want, backend.ErrAlreadyExists)
	}
	return b.volume(v), nil
}

func (b *Backend) GetVolume(ctx context.Context, name string) (backend.Volume, error) {
	if err := backend.ValidateVolumeName(name); err != nil {
		return backend.Volume{}, err
	}
	v, found, err := b.get(ctx, b.dataset(name))
	if err != nil {
		return backend.Volume{}, err
	}
	if !found || v.dsType != "volume" {
		return backend.Volume{}, b.missing(ctx, name)
	}
	return b.volume(v), nil
}

func (b *Backend) ListVolumes(ctx context.Context) ([]backend.Volume, error) {
	out, err := b.run.Run(ctx, "zfs", "list", "-Hp", "-t", "volume", "-d", "1", "-o", zvolColumns, b.root())
	if err != nil {
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return nil, fmt.Errorf("zfs: dataset %s does not exist: %w", b.root(), backend.ErrUnavailable)
		}
		return nil, fmt.Errorf("zfs: list: %w", err)
	}
	vols, err := parseZvols(out)
	if err != nil {
		return nil, err
	}
	list := []backend.Volume{}
	for _, v := range vols {
		if v.dsType == "volume" && path.Dir(v.name) == b.root() {
			list = append(list, b.volume(v))
		}
	}
	sort.Slice(list, func(i, j int) bool { return list[i].Name < list[j].Name })
	return list, nil
}

func (b *Backend) ExpandVolume(ctx context.Context, name string, sizeBytes int64) (backend.Volume, error) {
	if err := errors.Join(backend.ValidateVolumeName(name), backend.ValidateSize(sizeBytes)); err != nil {
		return backend.Volume{}, err
	}
	ds := b.dataset(name)
	v, found, err := b.get(ctx, ds)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found || v.dsType != "volume" {
		return backend.Volume{}, b.missing(ctx, name)
	}
	// zfs set refuses sizes that are not a multiple of volblocksize.
	target := backend.RoundUp(sizeBytes, v.volblocksize)
	if target <= v.volsize {
		return b.volume(v), nil
	}
	if _, err := b.run.Run(ctx, "zfs", "set", "volsize="+strconv.FormatInt(target, 10), ds); err != nil {
		return backend.Volume{}, fmt.Errorf("zfs: expand %s: %w", ds, classify(err))
	}
	v, found, err = b.get(ctx, ds)
	if err != nil {
		return backend.Volume{}, err
	}
	if !found {
		return backend.Volume{}, fmt.Errorf("zfs: %s vanished after resize", ds)
	}
	return b.volume(v), nil
}

func (b *Backend) DeleteVolume(ctx context.Context, name string) error {
	if err := backend.ValidateVolumeName(name); err != nil {
		return err
	}
	ds := b.dataset(name)
	v, found, err := b.get(ctx, ds)
	if err != nil {
		return err
	}
	if !found {
		// Deleting from a pool that is gone cannot be confirmed.
		if err := b.missing(ctx, name); !errors.Is(err, backend.ErrNotFound) {
			return err
		}
		return nil
	}
	if v.dsType != "volume" {
		return fmt.Errorf("zfs: %s is a %s, not a volume; refusing to destroy it: %w", ds, v.dsType, backend.ErrInvalid)
	}
	// A clone of a volume leaves its hidden origin snapshot to clean up.
	origin, err := b.origin(ctx, ds)
	if err != nil {
		return err
	}
	delay, waited := 100*time.Millisecond, time.Duration(0)
	for {
		_, err := b.run.Run(ctx, "zfs", "destroy", ds)
		if err == nil {
			break
		}
		err = classify(err)
		if errors.Is(err, backend.ErrNotFound) {
			return nil
		}
		if !errors.Is(err, backend.ErrInUse) {
			return fmt.Errorf("zfs: destroy %s: %w", ds, err)
		}
		if !transientBusy(err) {
			return fmt.Errorf("zfs: volume %s has snapshots or clones, or deleted snapshots ZFS keeps for the volumes restored from them (they depend on it); delete those first: %w", ds, err)
		}
		if waited >= b.busyWait {
			return fmt.Errorf("zfs: destroy %s: %w", ds, err)
		}
		if serr := b.sleep(ctx, delay); serr != nil {
			return fmt.Errorf("zfs: destroy %s: %w (gave up waiting: %w)", ds, err, serr)
		}
		waited += delay
		delay = min(2*delay, time.Second)
	}
	if _, snap, _ := strings.Cut(origin, "@"); strings.HasPrefix(snap, backend.HiddenSnapshotPrefix) {
		if _, err := b.run.Run(ctx, "zfs", "destroy", origin); err != nil {
			if err = classify(err); !errors.Is(err, backend.ErrNotFound) {
				return fmt.Errorf("zfs: destroy the clone origin %s: %w", origin, err)
			}
		}
	}
	return nil
}

// Capacity is the pool's usable size (used + available of its root
// dataset, which leaves out ZFS's reserved slop) and what the placement
// dataset may still use.
func (b *Backend) Capacity(ctx context.Context, _ map[string]string) (backend.Capacity, error) {
	c, _, err := b.capacity(ctx)
	if errors.Is(err, backend.ErrNotFound) {
		err = fmt.Errorf("%w: %w", backend.ErrUnavailable, err)
	}
	if err != nil {
		return backend.Capacity{}, fmt.Errorf("zfs: capacity of %s: %w", b.root(), err)
	}
	return c, nil
}

// capacity reads the pool's and the placement dataset's space, and the
// placement dataset's type, in one zfs list.
func (b *Backend) capacity(ctx context.Context) (backend.Capacity, string, error) {
	args := []string{"list", "-Hp", "-o", "name,type,used,avail", b.cfg.Pool}
	if b.root() != b.cfg.Pool {
		args = append(args, b.root())
	}
	out, err := b.run.Run(ctx, "zfs", args...)
	if err != nil {
		return backend.Capacity{}, "", classify(err)
	}
	var c backend.Capacity
	var rootType string
	seen := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 {
			return backend.Capacity{}, "", fmt.Errorf("zfs list: unexpected line %q", line)
		}
		used, err1 := strconv.ParseInt(f[2], 10, 64)
		avail, err2 := strconv.ParseInt(f[3], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return backend.Capacity{}, "", fmt.Errorf("zfs list: unexpected line %q: %w", line, err)
		}
		if f[0] == b.cfg.Pool {
			c.TotalBytes = used + avail
			seen++
		}
		if f[0] == b.root() {
			c.FreeBytes, rootType = avail, f[1]
			seen++
		}
	}
	if want := 2; seen != want {
		return backend.Capacity{}, "", fmt.Errorf("zfs list: unexpected output %q", out)
	}
	return c, rootType, nil
}

// Discover checks the pool through zpool (existence and health), then
// reads the parent dataset and the capacity in one zfs list.
func (b *Backend) Discover(ctx context.Context) backend.Pool {
	p := backend.Pool{Name: b.cfg.Pool, Kind: backend.KindZFS, Layout: b.Layout()}
	out, err := b.run.Run(ctx, "zpool", "list", "-Hp", "-o", "name,health", b.cfg.Pool)
	if err != nil {
		p.Reason = reason(b.cfg.Pool, err)
		return p
	}
	f := strings.Split(strings.TrimSpace(string(out)), "\t")
	if len(f) != 2 || f[0] != b.cfg.Pool {
		p.Reason = fmt.Sprintf("zpool list: unexpected output %q", out)
		return p
	}
	health := f[1]
	if health != "ONLINE" {
		// A pool that is not ONLINE may not answer for its space: only
		// the layout is checked, as far as zfs can tell.
		if b.cfg.ParentDataset != "" {
			v, found, err := b.get(ctx, b.root())
			switch {
			case err != nil:
				p.Reason = reason(b.cfg.Pool, err)
				return p
			case !found:
				p.Reason = fmt.Sprintf("parent dataset %s does not exist", b.root())
				return p
			case v.dsType != "filesystem":
				p.Reason = fmt.Sprintf("parent dataset %s is a %s, not a filesystem", b.root(), v.dsType)
				return p
			}
		}
		p.Discovered = true
		p.Reason = fmt.Sprintf("zpool %s is %s", b.cfg.Pool, health)
		return p
	}
	c, rootType, err := b.capacity(ctx)
	switch {
	case errors.Is(err, backend.ErrNotFound) && b.cfg.ParentDataset != "":
		p.Reason = fmt.Sprintf("parent dataset %s does not exist", b.root())
		return p
	case err != nil:
		p.Reason = reason(b.cfg.Pool, err)
		return p
	case rootType != "filesystem":
		p.Reason = fmt.Sprintf("parent dataset %s is a %s, not a filesystem", b.root(), rootType)
		return p
	}
	p.Discovered, p.Capacity, p.Healthy = true, c, true
	return p
}

// reason phrases a failed discovery step for Pool.Reason.
func reason(pool string, err error) string {
	var ce *backend.CommandError
	if !errors.As(err, &ce) {
		return err.Error()
	}
	switch {
	case ce.DidNotRun():
		return fmt.Sprintf("cannot run %s: %v", ce.Name, ce.Err)
	case deviceProblem(ce.Stderr):
		return fmt.Sprintf("cannot open the ZFS device (is the agent privileged?): %s", backend.FirstLine(ce.Stderr))
	case strings.Contains(ce.Stderr, "no such pool"):
		return fmt.Sprintf("zpool %s not found: %s", pool, backend.FirstLine(ce.Stderr))
	}
	return ce.Error()
}
