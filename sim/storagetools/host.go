// Package storagetools simulates the storage command-line tools of a storage
// node: zfs and zpool, and the LVM tools lvcreate, lvextend, lvremove, lvs
// and vgs. It answers the subset of their command lines the pillar agent
// uses, with the real tools' output formats, messages and exit codes.
//
// State lives as JSON in a directory, so separate processes (the multi-call
// binary under sim/cmd/fakestorage, invoked as zfs, lvcreate, …) share one
// simulated host; every command takes an exclusive lock on the directory.
// Each volume is backed by a sparse file under <dir>/dev at the path the
// real device would have under /dev (dev/zvol/<dataset>, dev/<vg>/<lv>), so
// a loop device can stand in for the block device.
// docs/pillar-agent-config.md ("Simulated storage tools") describes it.
package storagetools

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
)

// Defaults of the simulated tools.
const (
	// DefaultExtentSize is vgcreate's default physical extent size.
	DefaultExtentSize = 4 * mib
	// DefaultVolblocksize is the zvol block size OpenZFS 2.2 and later use
	// when none is given.
	DefaultVolblocksize = 16 * kib
)

// Pool health values zpool reports.
const (
	HealthOnline    = "ONLINE"
	HealthDegraded  = "DEGRADED"
	HealthFaulted   = "FAULTED"
	HealthUnavail   = "UNAVAIL"
	HealthSuspended = "SUSPENDED"
)

const stateFile = "state.json"

// state is the whole simulated host, stored as JSON.
type state struct {
	// DevicesDenied makes every tool fail as it does in an unprivileged
	// container whose device allowlist denies /dev/zfs and the
	// device-mapper control node.
	DevicesDenied bool                    `json:"devicesDenied,omitempty"`
	Pools         map[string]*zpool       `json:"pools"`
	Datasets      map[string]*dataset     `json:"datasets"`
	VolumeGroups  map[string]*volumeGroup `json:"volumeGroups"`
}

type zpool struct {
	Size   int64  `json:"size"`
	Health string `json:"health"`
	GUID   uint64 `json:"guid"`
}

const (
	typeFilesystem = "filesystem"
	typeVolume     = "volume"
)

type dataset struct {
	Type           string            `json:"type"`
	Volsize        int64             `json:"volsize,omitempty"`
	Volblocksize   int64             `json:"volblocksize,omitempty"`
	Refreservation int64             `json:"refreservation,omitempty"`
	Props          map[string]string `json:"props,omitempty"`
	GUID           uint64            `json:"guid"`
	// Origin is a clone's origin snapshot (snapshot.go).
	Origin string `json:"origin,omitempty"`
	// Creation is when the dataset was created, in Unix seconds; zero
	// for datasets from before snapshots were simulated.
	Creation int64 `json:"creation,omitempty"`
	// DeferDestroy marks a snapshot `zfs destroy -d` could not destroy
	// because clones depend on it; the last clone's destroy takes it too.
	DeferDestroy bool `json:"deferDestroy,omitempty"`
}

type volumeGroup struct {
	ExtentSize  int64                     `json:"extentSize"`
	ExtentCount int64                     `json:"extentCount"`
	UUID        string                    `json:"uuid"`
	LVs         map[string]*logicalVolume `json:"lvs"`
}

const (
	lvLinear   = "linear"
	lvThinPool = "thin-pool"
	lvThin     = "thin"
)

type logicalVolume struct {
	Type    string `json:"type"`
	Extents int64  `json:"extents"`
	// Pool names the thin pool of a thin volume.
	Pool string `json:"pool,omitempty"`
	// MetaExtents is the size of a thin pool's hidden metadata volume;
	// the pool takes as much again for the spare metadata volume.
	MetaExtents int64  `json:"metaExtents,omitempty"`
	UUID        string `json:"uuid"`
	// Tags are the LV's tags (lvcreate/lvchange --addtag), in order added.
	Tags []string `json:"tags,omitempty"`
	// Origin is a thin snapshot's origin LV (snapshot.go); lvs reports it
	// empty once the origin is removed.
	Origin string `json:"origin,omitempty"`
	// ActivationSkip is the activation-skip flag of thin snapshots.
	ActivationSkip bool `json:"activationSkip,omitempty"`
	// Created is lv_time in Unix seconds.
	Created int64 `json:"created,omitempty"`
}

// Host is one simulated storage node rooted at a directory.
type Host struct {
	dir string
}

// Open returns the host stored in dir, creating an empty one if needed.
func Open(dir string) (*Host, error) {
	if dir == "" {
		return nil, errors.New("storagetools: empty state directory")
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(abs, "dev"), 0o755); err != nil {
		return nil, fmt.Errorf("storagetools: %w", err)
	}
	h := &Host{dir: abs}
	if _, err := os.Stat(filepath.Join(abs, stateFile)); err == nil {
		// Every tool run opens the host: an existing state is read under
		// the lock by the command itself, not once more here.
		return h, nil
	}
	return h, h.update(func(*state) error { return nil })
}

// Dir is the state directory.
func (h *Host) Dir() string { return h.dir }

// DeviceRoot is where the backing files of volumes live; it stands for /dev.
func (h *Host) DeviceRoot() string { return filepath.Join(h.dir, "dev") }

// zvolPath and lvPath are the backing files of volumes.
func (h *Host) zvolPath(ds string) string {
	return filepath.Join(h.DeviceRoot(), "zvol", filepath.FromSlash(ds))
}

func (h *Host) lvPath(vg, lv string) string { return filepath.Join(h.DeviceRoot(), vg, lv) }

// update runs fn on the state under the directory lock and saves the state
// afterwards, even when fn fails: tools report errors after partial work
// as the real ones do, and fn only mutates what it means to keep.
func (h *Host) update(fn func(*state) error) error {
	unlock, err := h.lock()
	if err != nil {
		return err
	}
	defer unlock()
	st, raw, err := h.load()
	if err != nil {
		return err
	}
	ferr := fn(st)
	if err := h.save(st, raw); err != nil {
		return err
	}
	return ferr
}

func (h *Host) lock() (func(), error) {
	f, err := os.OpenFile(filepath.Join(h.dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, fmt.Errorf("storagetools: %w", err)
	}
	// flock locks belong to the open file, so two goroutines of one process
	// exclude each other just like two processes do.
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("storagetools: lock: %w", err)
	}
	return func() {
		_ = syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
		f.Close()
	}, nil
}

// load reads the state and returns it with the file's bytes (nil when
// there is no file yet).
func (h *Host) load() (*state, []byte, error) {
	st := &state{}
	data, err := os.ReadFile(filepath.Join(h.dir, stateFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return nil, nil, fmt.Errorf("storagetools: %w", err)
	default:
		if err := json.Unmarshal(data, st); err != nil {
			return nil, nil, fmt.Errorf("storagetools: corrupt %s: %w", stateFile, err)
		}
	}
	if st.Pools == nil {
		st.Pools = map[string]*zpool{}
	}
	if st.Datasets == nil {
		st.Datasets = map[string]*dataset{}
	}
	if st.VolumeGroups == nil {
		st.VolumeGroups = map[string]*volumeGroup{}
	}
	return st, data, nil
}

// save writes the state unless it is what the file already holds (a
// report such as lvs or zfs list changes nothing, and skipping the write
// keeps a read as cheap as the real tools' reads).
func (h *Host) save(st *state, old []byte) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	data = append(data, '\n')
	if old != nil && bytes.Equal(data, old) {
		return nil
	}
	tmp, err := os.CreateTemp(h.dir, ".state-*")
	if err != nil {
		return fmt.Errorf("storagetools: %w", err)
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return fmt.Errorf("storagetools: %w", err)
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), filepath.Join(h.dir, stateFile))
}

// Setup API: what an administrator does before the agent starts.

// CreatePool creates a zpool of size bytes with its root dataset.
func (h *Host) CreatePool(name string, size int64) error {
	if err := checkDatasetComponent(name); err != nil || strings.Contains(name, "/") {
		return fmt.Errorf("storagetools: invalid pool name %q", name)
	}
	if size < 64*mib {
		// zpool refuses vdevs smaller than 64 MiB.
		return fmt.Errorf("storagetools: pool %q: size %d is below the 64 MiB minimum", name, size)
	}
	return h.update(func(st *state) error {
		if _, ok := st.Pools[name]; ok {
			return fmt.Errorf("storagetools: pool %q already exists", name)
		}
		if _, ok := st.VolumeGroups[name]; ok {
			return fmt.Errorf("storagetools: %q is a volume group", name)
		}
		st.Pools[name] = &zpool{Size: size, Health: HealthOnline, GUID: randomGUID()}
		st.Datasets[name] = &dataset{Type: typeFilesystem, GUID: randomGUID()}
		return nil
	})
}

// CreateDataset creates a filesystem dataset (e.g. a parent dataset) and
// any missing parents, like `zfs create -p`.
func (h *Host) CreateDataset(name string) error {
	var out, errb strings.Builder
	if code := h.Run("zfs", []string{"create", "-p", name}, &out, &errb); code != 0 {
		return fmt.Errorf("storagetools: %s", strings.TrimSpace(errb.String()))
	}
	return nil
}

// DestroyPool removes a pool and everything in it, as if it were exported.
func (h *Host) DestroyPool(name string) error {
	return h.update(func(st *state) error {
		if _, ok := st.Pools[name]; !ok {
			return fmt.Errorf("storagetools: no pool %q", name)
		}
		for ds, d := range st.Datasets {
			if poolOf(ds) == name {
				if d.Type == typeVolume {
					os.Remove(h.zvolPath(ds))
				}
				if d.Type == typeSnapshot {
					os.Remove(h.zfsSnapPath(ds))
				}
				delete(st.Datasets, ds)
			}
		}
		os.RemoveAll(filepath.Join(h.DeviceRoot(), "zvol", name))
		delete(st.Pools, name)
		return nil
	})
}

// SetPoolHealth sets the health zpool reports for a pool.
func (h *Host) SetPoolHealth(name, health string) error {
	switch health {
	case HealthOnline, HealthDegraded, HealthFaulted, HealthUnavail, HealthSuspended:
	default:
		return fmt.Errorf("storagetools: unknown pool health %q", health)
	}
	return h.update(func(st *state) error {
		p, ok := st.Pools[name]
		if !ok {
			return fmt.Errorf("storagetools: no pool %q", name)
		}
		p.Health = health
		return nil
	})
}

// CreateVolumeGroup creates a volume group of size bytes (rounded down to
// whole extents); extentSize 0 means DefaultExtentSize.
func (h *Host) CreateVolumeGroup(name string, size, extentSize int64) error {
	if extentSize == 0 {
		extentSize = DefaultExtentSize
	}
	if extentSize < kib || extentSize&(extentSize-1) != 0 {
		return fmt.Errorf("storagetools: extent size %d is not a power of 2 of at least 1 KiB", extentSize)
	}
	if msg := checkLVMName(name); msg != "" {
		return fmt.Errorf("storagetools: invalid volume group name %q", name)
	}
	if size/extentSize < 1 {
		return fmt.Errorf("storagetools: volume group %q: size %d is below one extent", name, size)
	}
	return h.update(func(st *state) error {
		if _, ok := st.VolumeGroups[name]; ok {
			return fmt.Errorf("storagetools: volume group %q already exists", name)
		}
		if _, ok := st.Pools[name]; ok {
			return fmt.Errorf("storagetools: %q is a zpool", name)
		}
		st.VolumeGroups[name] = &volumeGroup{
			ExtentSize:  extentSize,
			ExtentCount: size / extentSize,
			UUID:        lvmUUID(),
			LVs:         map[string]*logicalVolume{},
		}
		return nil
	})
}

// RemoveVolumeGroup removes a volume group and its volumes.
func (h *Host) RemoveVolumeGroup(name string) error {
	return h.update(func(st *state) error {
		if _, ok := st.VolumeGroups[name]; !ok {
			return fmt.Errorf("storagetools: no volume group %q", name)
		}
		os.RemoveAll(filepath.Join(h.DeviceRoot(), name))
		os.RemoveAll(h.freedDir(name))
		delete(st.VolumeGroups, name)
		return nil
	})
}

// CreateThinPool creates a thin pool of size bytes in a volume group, like
// `lvcreate --type thin-pool -L size -n name vg`.
func (h *Host) CreateThinPool(vg, name string, size int64) error {
	var out, errb strings.Builder
	args := []string{"--type", "thin-pool", "-L", fmt.Sprintf("%db", roundUp(size, 512)), "-n", name, vg}
	if code := h.Run("lvcreate", args, &out, &errb); code != 0 {
		return fmt.Errorf("storagetools: %s", strings.TrimSpace(errb.String()))
	}
	return nil
}

// SetDevicesDenied makes every tool fail as in a container that may not
// open host devices (the agent's privileged=false case), or undoes it.
func (h *Host) SetDevicesDenied(denied bool) error {
	return h.update(func(st *state) error {
		st.DevicesDenied = denied
		return nil
	})
}

// Dump writes the state as JSON.
func (h *Host) Dump(w io.Writer) error {
	unlock, err := h.lock()
	if err != nil {
		return err
	}
	defer unlock()
	data, err := os.ReadFile(filepath.Join(h.dir, stateFile))
	if err != nil {
		return err
	}
	_, err = w.Write(data)
	return err
}

// Tools is every command name Run answers.
var Tools = []string{"zfs", "zpool", "lvcreate", "lvextend", "lvremove", "lvchange", "lvs", "vgs", "blkdiscard"}

// Run runs one simulated command with its arguments (without the command
// name) and returns its exit status, writing what the real tool would to
// stdout and stderr.
func (h *Host) Run(name string, args []string, stdout, stderr io.Writer) int {
	code := 0
	err := h.update(func(st *state) error {
		t := &tool{host: h, st: st, out: stdout, errw: stderr}
		switch name {
		case "zfs":
			code = t.zfs(args)
		case "zpool":
			code = t.zpool(args)
		case "lvcreate", "lvextend", "lvremove", "lvchange", "lvs", "vgs":
			code = t.lvm(name, args)
		case "blkdiscard":
			code = t.blkdiscard(args)
		default:
			fmt.Fprintf(stderr, "%s: command not simulated\n", name)
			code = 127
		}
		return nil
	})
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return code
}

// tool carries one command's state and output streams.
type tool struct {
	host *Host
	st   *state
	out  io.Writer
	errw io.Writer
}

func (t *tool) printf(format string, args ...any) { fmt.Fprintf(t.out, format, args...) }
func (t *tool) errorf(format string, args ...any) { fmt.Fprintf(t.errw, format, args...) }

// sparse file helpers for backing devices.

func createBacking(path string, size int64) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Truncate(size)
}

func resizeBacking(path string, size int64) error {
	err := os.Truncate(path, size)
	if errors.Is(err, os.ErrNotExist) {
		return createBacking(path, size)
	}
	return err
}

func removeBacking(path string, stopAt string) {
	os.Remove(path)
	// Drop directories the volume's path created, up to the device root.
	for dir := filepath.Dir(path); dir != stopAt && strings.HasPrefix(dir, stopAt); dir = filepath.Dir(dir) {
		if os.Remove(dir) != nil {
			break
		}
	}
}

// allocatedBytes is how much of a sparse backing file has been written,
// which stands for the data a volume holds.
func allocatedBytes(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		n := st.Blocks * 512
		if n > fi.Size() {
			n = fi.Size()
		}
		return n
	}
	return 0
}

func randomGUID() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	var v uint64
	for _, x := range b {
		v = v<<8 | uint64(x)
	}
	return v
}

// lvmUUID returns an identifier in LVM's format: 32 characters in groups
// of 6-4-4-4-4-4-6.
func lvmUUID() string {
	const chars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789"
	var b [32]byte
	_, _ = rand.Read(b[:])
	var s strings.Builder
	for i, x := range b {
		switch i {
		case 6, 10, 14, 18, 22, 26:
			s.WriteByte('-')
		}
		s.WriteByte(chars[int(x)%len(chars)])
	}
	return s.String()
}

func roundUp(n, unit int64) int64 {
	if unit <= 0 {
		return n
	}
	return (n + unit - 1) / unit * unit
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
