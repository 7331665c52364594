//go:build kernelguest

// Package guest runs inside the qemu guest of scripts/e2e-kernel.sh, on a
// real Debian kernel with nvmet, nvme-tcp, device-mapper thin and ZFS: the
// backends' shared suite on the real tools, the exporter's shared suite on
// the real configfs, and the real pillar-agent binary end to end through a
// real `nvme connect`. It is compiled with -tags kernelguest and never runs
// on the host.
package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/backendtest"
	"github.com/pillarhq/pillar/impl/pillar/backend/lvm"
	"github.com/pillarhq/pillar/impl/pillar/backend/zfs"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
	"github.com/pillarhq/pillar/impl/pillar/nvmet/nvmettest"
)

const mib = int64(1) << 20

var seq atomic.Int64

func sh(t testing.TB, name string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// try runs a command whose failure is expected or harmless (cleanup).
func try(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

// loopDevice backs a fresh loop device with a sparse file of size bytes.
func loopDevice(t testing.TB, size int64) string {
	t.Helper()
	f := filepath.Join("/var/tmp", fmt.Sprintf("disk%d.img", seq.Add(1)))
	sh(t, "truncate", "-s", strconv.FormatInt(size, 10), f)
	dev := sh(t, "losetup", "-f", "--show", f)
	t.Cleanup(func() { try("losetup", "-d", dev); os.Remove(f) })
	return dev
}

func execRunner() backend.Runner { return &backend.ExecRunner{} }

// zfsPool makes a fresh 1 GiB pool on its own loop device.
func zfsPool(t testing.TB, parent string) string {
	dev := loopDevice(t, 1<<30)
	pool := fmt.Sprintf("gp%d", seq.Add(1))
	sh(t, "zpool", "create", "-f", "-O", "mountpoint=none", pool, dev)
	t.Cleanup(func() {
		for i := 0; i < 20; i++ { // zvols may still be busy in udev
			if _, err := try("zpool", "destroy", "-f", pool); err == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	if parent != "" {
		sh(t, "zfs", "create", "-p", pool+"/"+parent)
	}
	return pool
}

// lvmGroup makes a fresh 1 GiB volume group (4 MiB extents) with a 512 MiB
// thin pool thin0.
func lvmGroup(t testing.TB) string {
	dev := loopDevice(t, 1<<30)
	vg := fmt.Sprintf("gvg%d", seq.Add(1))
	sh(t, "pvcreate", "-q", "-y", dev)
	sh(t, "vgcreate", "-q", "-s", "4m", vg, dev)
	sh(t, "lvcreate", "-q", "-y", "--type", "thin-pool", "-L", "512m", "-n", "thin0", vg)
	t.Cleanup(func() {
		try("vgremove", "-q", "-f", vg)
		try("pvremove", "-q", "-f", dev)
	})
	return vg
}

func zfsTarget(name, parent string, params map[string]string, granule int64) backendtest.Target {
	return backendtest.Target{
		Name: name,
		New: func(t *testing.T) backendtest.Fixture {
			pool := zfsPool(t, parent)
			return backendtest.Fixture{Backend: zfs.New(zfs.Config{Pool: pool, ParentDataset: parent}, execRunner()), Params: params, Granule: granule, Layout: backend.Layout{ParentDataset: parent}}
		},
		Missing: func(t *testing.T) backend.Backend {
			return zfs.New(zfs.Config{Pool: fmt.Sprintf("absent%d", seq.Add(1)), ParentDataset: parent}, execRunner())
		},
		BadLayout: func(t *testing.T) backend.Backend {
			return zfs.New(zfs.Config{Pool: zfsPool(t, ""), ParentDataset: "k8s/missing"}, execRunner())
		},
		BadParams: map[string]string{"volsize": "1G"},
	}
}

func lvmTarget(name string, cfg lvm.Config, params map[string]string, thin bool) backendtest.Target {
	withVG := func(vg string) lvm.Config { c := cfg; c.VolumeGroup = vg; return c }
	tg := backendtest.Target{
		Name: name, Thin: thin, Shared: true,
		New: func(t *testing.T) backendtest.Fixture {
			vg := lvmGroup(t)
			return backendtest.Fixture{Backend: lvm.New(withVG(vg), execRunner()), Params: params, Granule: 4 * mib, Layout: backend.Layout{ThinPool: cfg.ThinPool},
				// Another user's LV in the shared group: no pillar-csi tag.
				AddForeign: func(t *testing.T, name string, size int64) {
					sh(t, "lvcreate", "-q", "-y", "-n", name, "-L", fmt.Sprintf("%db", size), vg)
				}}
		},
		Missing: func(t *testing.T) backend.Backend {
			return lvm.New(withVG(fmt.Sprintf("absent%d", seq.Add(1))), execRunner())
		},
		BadParams: map[string]string{"stripes": "2"},
	}
	if cfg.ThinPool != "" {
		tg.BadLayout = func(t *testing.T) backend.Backend {
			c := withVG(lvmGroup(t))
			c.ThinPool, c.ProvisioningMode = "missing", backend.ModeThin
			return lvm.New(c, execRunner())
		}
	}
	return tg
}

// The backends' shared suite, unchanged, on the real zfs and LVM tools
// (the same cases conformance/backends runs on the simulated tools).
func TestBackendsOnRealTools(t *testing.T) {
	backendtest.Exercise(t,
		// Debian 12's OpenZFS 2.1 defaults volblocksize to 8K (2.2 and
		// the simulator: 16K); the backend reads it from each zvol.
		zfsTarget("zfs/parent-dataset", "k8s/volumes", nil, 8<<10),
		lvmTarget("lvm/linear", lvm.Config{}, nil, false),
		lvmTarget("lvm/thin-default", lvm.Config{ThinPool: "thin0", ProvisioningMode: "thin"}, nil, true),
	)
}

// resetTarget removes everything from the kernel target's configfs tree,
// in the order the kernel requires.
func resetTarget(t testing.TB) {
	t.Helper()
	root := nvmet.DefaultRoot
	ports, _ := filepath.Glob(root + "/ports/*")
	for _, p := range ports {
		links, _ := filepath.Glob(p + "/subsystems/*")
		for _, l := range links {
			os.Remove(l)
		}
		os.Remove(p)
	}
	subs, _ := filepath.Glob(root + "/subsystems/*")
	for _, s := range subs {
		hosts, _ := filepath.Glob(s + "/allowed_hosts/*")
		for _, h := range hosts {
			os.Remove(h)
		}
		nss, _ := filepath.Glob(s + "/namespaces/*")
		for _, n := range nss {
			os.WriteFile(n+"/enable", []byte("0"), 0o644)
			os.Remove(n)
		}
		os.Remove(s)
	}
	hosts, _ := filepath.Glob(root + "/hosts/*")
	for _, h := range hosts {
		os.Remove(h)
	}
	if left, _ := filepath.Glob(root + "/*/*"); len(left) > 0 {
		t.Fatalf("target not empty after reset: %v", left)
	}
}

// The exporter's shared suite on the real kernel target: the same checks
// conformance/backends runs on the configfs fake.
func TestExporterOnRealKernel(t *testing.T) {
	nvmettest.Exercise(t, func(t *testing.T) nvmettest.Target {
		resetTarget(t)
		t.Cleanup(func() { resetTarget(t) })
		return nvmettest.Target{FS: nvmet.OSFS{}, Root: nvmet.DefaultRoot, Device: func(t *testing.T) string { return loopDevice(t, 16*mib) }}
	})
}

// hostNQN is this guest's host NQN (written by the payload's init).
func hostNQN(t testing.TB) string {
	b, err := os.ReadFile("/etc/nvme/hostnqn")
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

var nsName = regexp.MustCompile(`^nvme\d+n\d+$`)

// deviceByUUID finds the block device of a connected namespace by its
// UUID. With native multipath the hidden path devices (nvmeXcYnZ) carry
// the same uuid as the head device; only the head is usable.
func deviceByUUID(uuid string) string {
	blocks, _ := os.ReadDir("/sys/block")
	for _, b := range blocks {
		if !nsName.MatchString(b.Name()) {
			continue
		}
		got, err := os.ReadFile(filepath.Join("/sys/block", b.Name(), "uuid"))
		if err == nil && strings.TrimSpace(string(got)) == uuid {
			return "/dev/" + b.Name()
		}
	}
	return ""
}

func waitFor(t testing.TB, what string, limit time.Duration, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", limit, what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func blockSize(t testing.TB, dev string) int64 {
	b, err := os.ReadFile(filepath.Join("/sys/block", filepath.Base(dev), "size"))
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	return n * 512
}

// writeRead writes a random pattern at offset through one device and reads
// it back through another path to the same data.
func pattern(t testing.TB) []byte {
	p := make([]byte, 1<<20)
	if _, err := rand.Read(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeAt(t testing.TB, dev string, off int64, data []byte) {
	t.Helper()
	f, err := os.OpenFile(dev, os.O_WRONLY|os.O_SYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(data, off); err != nil {
		t.Fatalf("write %s: %v", dev, err)
	}
}

func readAt(t testing.TB, dev string, off int64, n int) []byte {
	t.Helper()
	// Drop the page cache so the read crosses the wire.
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o644)
	f, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("read %s: %v", dev, err)
	}
	return b
}

func sameBytes(a, b []byte) bool { return bytes.Equal(a, b) }

// benchLine prints one call's duration for make bench, which collects
// these lines from the console (conformance/bench/cmd/kernelbench).
func benchLine(op, what string, d time.Duration) {
	fmt.Printf("PILLAR-BENCH %s %s %.1fms\n", op, what, float64(d)/float64(time.Millisecond))
}
