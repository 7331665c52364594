package backends_test

// The backends' shared suite runs here against the simulated storage tools,
// in process and through the fakestorage binary. It lives in conformance/
// because it joins impl/ and sim/, which never import each other.

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/backendtest"
	"github.com/pillarhq/pillar/impl/pillar/backend/lvm"
	"github.com/pillarhq/pillar/impl/pillar/backend/zfs"
	"github.com/pillarhq/pillar/sim/storagetools"
)

const mib = int64(1) << 20

// runnerFor gives the runner that reaches a simulated host.
type runnerFor func(h *storagetools.Host) backend.Runner

// simRunner runs the simulated tools in process, failing the way
// ExecRunner does for a tool that exits non-zero.
type simRunner struct{ host *storagetools.Host }

func (r simRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, &backend.CommandError{Name: name, Args: args, ExitCode: -1, Err: err}
	}
	var stdout, stderr bytes.Buffer
	if code := r.host.Run(name, args, &stdout, &stderr); code != 0 {
		return stdout.Bytes(), &backend.CommandError{Name: name, Args: args, ExitCode: code, Stderr: stderr.String()}
	}
	return stdout.Bytes(), nil
}

func inProcess(h *storagetools.Host) backend.Runner { return simRunner{h} }

func newHost(t *testing.T) *storagetools.Host {
	t.Helper()
	h, err := storagetools.Open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// zfsHost is a host with a 1 GiB pool "tank" and, when parent is set, the
// dataset tank/<parent>.
func zfsHost(t *testing.T, parent string) *storagetools.Host {
	h := newHost(t)
	check(t, h.CreatePool("tank", 1<<30))
	if parent != "" {
		check(t, h.CreateDataset("tank/"+parent))
	}
	return h
}

func zfsTarget(name, parent string, params map[string]string, granule int64, run runnerFor) backendtest.Target {
	newBackend := func(h *storagetools.Host, pool, parent string) *zfs.Backend {
		return zfs.New(zfs.Config{Pool: pool, ParentDataset: parent, DeviceRoot: h.DeviceRoot()}, run(h))
	}
	return backendtest.Target{
		Name: name,
		New: func(t *testing.T) backendtest.Fixture {
			h := zfsHost(t, parent)
			return backendtest.Fixture{
				Backend: newBackend(h, "tank", parent),
				Params:  params,
				Granule: granule,
				Layout:  backend.Layout{ParentDataset: parent},
			}
		},
		Missing: func(t *testing.T) backend.Backend {
			return newBackend(zfsHost(t, ""), "absent", parent)
		},
		BadLayout: func(t *testing.T) backend.Backend {
			return newBackend(zfsHost(t, ""), "tank", "k8s/missing")
		},
		DenyDevices: func(t *testing.T) backend.Backend {
			h := zfsHost(t, parent)
			check(t, h.SetDevicesDenied(true))
			return newBackend(h, "tank", parent)
		},
		BadParams: map[string]string{"volsize": "1G"},
	}
}

// lvmHost is a host with a 1 GiB volume group "vg0" (4 MiB extents) and a
// 512 MiB thin pool "thin0".
func lvmHost(t *testing.T) *storagetools.Host {
	h := newHost(t)
	check(t, h.CreateVolumeGroup("vg0", 1<<30, 4*mib))
	check(t, h.CreateThinPool("vg0", "thin0", 512*mib))
	return h
}

func lvmTarget(name string, cfg lvm.Config, params map[string]string, thin bool, run runnerFor) backendtest.Target {
	newBackend := func(h *storagetools.Host, c lvm.Config) *lvm.Backend {
		c.DeviceRoot = h.DeviceRoot()
		return lvm.New(c, run(h))
	}
	tg := backendtest.Target{
		Name:   name,
		Thin:   thin,
		Shared: true,
		New: func(t *testing.T) backendtest.Fixture {
			h := lvmHost(t)
			return backendtest.Fixture{
				Backend: newBackend(h, cfg),
				Params:  params,
				Granule: 4 * mib,
				Layout:  backend.Layout{ThinPool: cfg.ThinPool},
				// Another user's LV: created with lvcreate, no pillar-csi tag.
				AddForeign: func(t *testing.T, name string, size int64) {
					var out, errb strings.Builder
					if code := h.Run("lvcreate", []string{"-y", "-n", name, "-L", fmt.Sprintf("%db", size), "vg0"}, &out, &errb); code != 0 {
						t.Fatalf("lvcreate %s: %s", name, errb.String())
					}
				},
			}
		},
		Missing: func(t *testing.T) backend.Backend {
			c := cfg
			c.VolumeGroup = "absent"
			return newBackend(lvmHost(t), c)
		},
		DenyDevices: func(t *testing.T) backend.Backend {
			h := lvmHost(t)
			check(t, h.SetDevicesDenied(true))
			return newBackend(h, cfg)
		},
		BadParams: map[string]string{"stripes": "2"},
	}
	if cfg.ThinPool != "" {
		tg.BadLayout = func(t *testing.T) backend.Backend {
			c := cfg
			c.ThinPool, c.ProvisioningMode = "missing", backend.ModeThin
			return newBackend(lvmHost(t), c)
		}
	}
	return tg
}

func TestBackends(t *testing.T) {
	backendtest.Exercise(t,
		zfsTarget("zfs/pool-root", "", nil, 16<<10, inProcess),
		zfsTarget("zfs/parent-dataset", "k8s/volumes", nil, 16<<10, inProcess),
		zfsTarget("zfs/volblocksize-64K", "", map[string]string{"volblocksize": "64K", "compression": "lz4"}, 64<<10, inProcess),
		lvmTarget("lvm/linear", lvm.Config{VolumeGroup: "vg0"}, nil, false, inProcess),
		lvmTarget("lvm/linear-with-thinpool", lvm.Config{VolumeGroup: "vg0", ThinPool: "thin0"}, map[string]string{lvm.ParamProvisioningMode: "linear"}, false, inProcess),
		lvmTarget("lvm/thin-default", lvm.Config{VolumeGroup: "vg0", ThinPool: "thin0", ProvisioningMode: "thin"}, nil, true, inProcess),
		lvmTarget("lvm/thin-by-param", lvm.Config{VolumeGroup: "vg0", ThinPool: "thin0"}, map[string]string{lvm.ParamProvisioningMode: "thin"}, true, inProcess),
	)
}

// TestBackendsThroughBinary runs the suite once more with the production
// ExecRunner against the fakestorage binary behind tool-named symlinks, as
// an agent on simulated storage does: every tool run is a separate process
// sharing the state directory.
func TestBackendsThroughBinary(t *testing.T) {
	bin := buildFakestorage(t)
	viaBinary := func(h *storagetools.Host) backend.Runner {
		return &backend.ExecRunner{Dir: bin, Env: []string{storagetools.StateEnv + "=" + h.Dir()}}
	}
	backendtest.Exercise(t,
		zfsTarget("zfs/exec", "k8s", nil, 16<<10, viaBinary),
		lvmTarget("lvm/exec-thin", lvm.Config{VolumeGroup: "vg0", ThinPool: "thin0", ProvisioningMode: "thin"}, nil, true, viaBinary),
	)
}

// binDir is the conformance suites' shared flag: the built binaries.
var binDir = flag.String("bin-dir", "", "directory holding the built binaries (default: build fakestorage here)")

// buildFakestorage finds bin/fakestorage (or builds sim/cmd/fakestorage) and
// returns a directory of tool-named symlinks to it.
func buildFakestorage(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	exe := filepath.Join(dir, "fakestorage")
	if *binDir != "" {
		exe = filepath.Join(*binDir, "fakestorage")
		if _, err := os.Stat(exe); err != nil {
			t.Fatalf("%s missing (run make build): %v", exe, err)
		}
	} else {
		//nolint:staticcheck // the go of the toolchain running the test; a test binary runs where it was built
		cmd := exec.Command(filepath.Join(runtime.GOROOT(), "bin", "go"), "build", "-o", exe, "github.com/pillarhq/pillar/sim/cmd/fakestorage")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build fakestorage: %v\n%s", err, out)
		}
	}
	links := filepath.Join(dir, "bin")
	if out, err := exec.Command(exe, "links", links).CombinedOutput(); err != nil {
		t.Fatalf("fakestorage links: %v\n%s", err, out)
	}
	return links
}

// S-AG-9: the parentDataset and thinPool an agent reports for a pool are the
// configured ones, verified to exist; a configured layout that is missing
// leaves the pool undiscovered rather than placing volumes elsewhere.
func TestDiscoverReportsLayout(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	zh := zfsHost(t, "k8s/volumes")
	lh := lvmHost(t)
	cases := []struct {
		b          backend.Backend
		layout     backend.Layout
		discovered bool
	}{
		{zfs.New(zfs.Config{Pool: "tank", ParentDataset: "k8s/volumes", DeviceRoot: zh.DeviceRoot()}, inProcess(zh)), backend.Layout{ParentDataset: "k8s/volumes"}, true},
		{zfs.New(zfs.Config{Pool: "tank", DeviceRoot: zh.DeviceRoot()}, inProcess(zh)), backend.Layout{}, true},
		{zfs.New(zfs.Config{Pool: "tank", ParentDataset: "k8s/other", DeviceRoot: zh.DeviceRoot()}, inProcess(zh)), backend.Layout{ParentDataset: "k8s/other"}, false},
		{lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thin0", DeviceRoot: lh.DeviceRoot()}, inProcess(lh)), backend.Layout{ThinPool: "thin0"}, true},
		{lvm.New(lvm.Config{VolumeGroup: "vg0", DeviceRoot: lh.DeviceRoot()}, inProcess(lh)), backend.Layout{}, true},
		{lvm.New(lvm.Config{VolumeGroup: "vg0", ThinPool: "thin1", DeviceRoot: lh.DeviceRoot()}, inProcess(lh)), backend.Layout{ThinPool: "thin1"}, false},
	}
	for _, c := range cases {
		p := c.b.Discover(ctx)
		if p.Layout != c.layout || p.Discovered != c.discovered || p.Healthy != c.discovered {
			t.Errorf("%s %+v: Discover = %+v, want layout %+v discovered %v", c.b.Kind(), c.b.Layout(), p, c.layout, c.discovered)
		}
	}
}

// S-AG-12: when the agent may not open host devices, pools are not
// discovered and the reason points at the missing privilege.
func TestUnprivilegedAgentIsDegraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	zh, lh := zfsHost(t, ""), lvmHost(t)
	check(t, zh.SetDevicesDenied(true))
	check(t, lh.SetDevicesDenied(true))
	for _, b := range []backend.Backend{
		zfs.New(zfs.Config{Pool: "tank", DeviceRoot: zh.DeviceRoot()}, inProcess(zh)),
		lvm.New(lvm.Config{VolumeGroup: "vg0", DeviceRoot: lh.DeviceRoot()}, inProcess(lh)),
	} {
		p := b.Discover(ctx)
		if p.Discovered || p.Healthy || !strings.Contains(p.Reason, "is the agent privileged?") {
			t.Errorf("%s: Discover = %+v", b.Kind(), p)
		}
	}
}

// The LVM backend keeps a volume group's extent size between calls; a
// group removed and made again with another extent size is noticed (the
// removal by lvcreate's refusal, the new size by lvcreate rounding up),
// so sizes stay the tools' and refusals keep their meaning.
func TestLVMExtentSizeFollowsTheGroup(t *testing.T) {
	t.Parallel()
	h := newHost(t)
	check(t, h.CreateVolumeGroup("vg0", 256*mib, 4*mib))
	b := lvm.New(lvm.Config{VolumeGroup: "vg0", DeviceRoot: h.DeviceRoot()}, inProcess(h))
	ctx := context.Background()
	v, err := b.CreateVolume(ctx, "pvc-1", 1*mib, nil)
	if err != nil || v.SizeBytes != 4*mib {
		t.Fatalf("create with 4 MiB extents = %+v, %v", v, err)
	}

	// Recreated under the agent with 8 MiB extents: what lvcreate makes
	// is reported, not what 4 MiB extents would have made.
	check(t, h.RemoveVolumeGroup("vg0"))
	check(t, h.CreateVolumeGroup("vg0", 256*mib, 8*mib))
	if v, err = b.CreateVolume(ctx, "pvc-2", 1*mib, nil); err != nil || v.SizeBytes != 8*mib {
		t.Fatalf("create after the group changed = %+v, %v", v, err)
	}
	if got, err := b.GetVolume(ctx, "pvc-2"); err != nil || got.SizeBytes != 8*mib {
		t.Fatalf("the tools' size = %+v, %v", got, err)
	}
	// A retry of that create is the same volume, not a conflict.
	if v, err = b.CreateVolume(ctx, "pvc-2", 1*mib, nil); err != nil || v.SizeBytes != 8*mib {
		t.Fatalf("retried create = %+v, %v", v, err)
	}

	// Gone: lvcreate's refusal is Unavailable, and the group made again
	// with 4 MiB extents is read afresh.
	check(t, h.RemoveVolumeGroup("vg0"))
	if _, err := b.CreateVolume(ctx, "pvc-3", 1*mib, nil); !errors.Is(err, backend.ErrUnavailable) {
		t.Fatalf("create in a removed group: %v", err)
	}
	check(t, h.CreateVolumeGroup("vg0", 64*mib, 4*mib))
	if v, err = b.CreateVolume(ctx, "pvc-3", 1*mib, nil); err != nil || v.SizeBytes != 4*mib {
		t.Fatalf("create in the group made again = %+v, %v", v, err)
	}
	// Short of space: lvcreate refuses, whatever was read before.
	if _, err := b.CreateVolume(ctx, "pvc-4", 128*mib, nil); !errors.Is(err, backend.ErrResourceExhausted) {
		t.Fatalf("create beyond free space: %v", err)
	}
}
