package zfs

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/backendtest"
)

type call = backendtest.Call

func newScripted(t *testing.T, calls ...call) *Backend {
	return New(Config{Pool: "tank", ParentDataset: "k8s"}, backendtest.NewScript(t, calls...))
}

// The command lines and output parsing match the real zfs(8).
func TestCreateVolumeCommands(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: "zfs create -V 1000000 -o compression=lz4 -o refreservation=none -o volblocksize=8K tank/k8s/pvc-1"},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1", Stdout: "tank/k8s/pvc-1\tvolume\t1007616\t8192\n"},
	)
	v, err := b.CreateVolume(context.Background(), "pvc-1", 1000000, map[string]string{"volblocksize": "8K", "compression": "lz4", "refreservation": "none"})
	if err != nil {
		t.Fatal(err)
	}
	want := backend.Volume{Name: "pvc-1", SizeBytes: 1007616, DevicePath: "/dev/zvol/tank/k8s/pvc-1", Native: "tank/k8s/pvc-1"}
	if v != want {
		t.Fatalf("volume %+v, want %+v", v, want)
	}
}

func TestCreateVolumeLostRace(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: "zfs create -V 16384 tank/k8s/pvc-1", Stderr: "cannot create 'tank/k8s/pvc-1': dataset already exists\n", Exit: 1},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1", Stdout: "tank/k8s/pvc-1\tvolume\t16384\t16384\n"},
	)
	if _, err := b.CreateVolume(context.Background(), "pvc-1", 16384, nil); err != nil {
		t.Fatal(err)
	}
}

func TestCreateOverFilesystemIsAlreadyExists(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: "zfs create -V 16384 tank/k8s/pvc-1", Stderr: "cannot create 'tank/k8s/pvc-1': dataset already exists\n", Exit: 1},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1", Stdout: "tank/k8s/pvc-1\tfilesystem\t-\t-\n"},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1", Stdout: "tank/k8s/pvc-1\tfilesystem\t-\t-\n"},
	)
	_, err := b.CreateVolume(context.Background(), "pvc-1", 16384, nil)
	if !errors.Is(err, backend.ErrAlreadyExists) {
		t.Fatalf("create over a filesystem: %v", err)
	}
	if err := b.DeleteVolume(context.Background(), "pvc-1"); !errors.Is(err, backend.ErrInvalid) {
		t.Fatalf("delete of a filesystem: %v", err)
	}
}

func TestExpandRoundsToVolblocksize(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1", Stdout: "tank/k8s/pvc-1\tvolume\t1073741824\t8192\n"},
		call{Cmd: "zfs set volsize=1073750016 tank/k8s/pvc-1"},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1", Stdout: "tank/k8s/pvc-1\tvolume\t1073750016\t8192\n"},
	)
	v, err := b.ExpandVolume(context.Background(), "pvc-1", 1073741825)
	if err != nil || v.SizeBytes != 1073750016 {
		t.Fatalf("expand = %+v, %v", v, err)
	}
}

func TestListAndCapacity(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: "zfs list -Hp -t volume -d 1 -o name,type,volsize,volblocksize tank/k8s",
			Stdout: "tank/k8s/b\tvolume\t32768\t16384\ntank/k8s/a\tvolume\t16384\t16384\n"},
		call{Cmd: "zfs list -Hp -o name,type,used,avail tank tank/k8s", Stdout: "tank\tfilesystem\t1000\t9000\ntank/k8s\tfilesystem\t400\t8000\n"},
	)
	vols, err := b.ListVolumes(context.Background())
	if err != nil || len(vols) != 2 || vols[0].Name != "a" || vols[1].SizeBytes != 32768 {
		t.Fatalf("ListVolumes = %+v, %v", vols, err)
	}
	c, err := b.Capacity(context.Background(), nil)
	if err != nil || c != (backend.Capacity{TotalBytes: 10000, FreeBytes: 8000}) {
		t.Fatalf("Capacity = %+v, %v", c, err)
	}
}

func TestDiscoverDegradedPool(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: "zpool list -Hp -o name,health tank", Stdout: "tank\tDEGRADED\n"},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s", Stdout: "tank/k8s\tfilesystem\t-\t-\n"},
	)
	p := b.Discover(context.Background())
	if !p.Discovered || p.Healthy || p.Reason != "zpool tank is DEGRADED" || p.Layout.ParentDataset != "k8s" {
		t.Fatalf("Discover = %+v", p)
	}
}

// The real tools' failure messages map to the errors the API edge needs.
func TestClassify(t *testing.T) {
	t.Parallel()
	cases := []struct {
		stderr string
		exit   int
		want   error
	}{
		{"cannot create 'tank/v': out of space\n", 1, backend.ErrResourceExhausted},
		{"cannot set property for 'tank/v': size is greater than available space\n", 1, backend.ErrResourceExhausted},
		{"cannot create 'tank/v': dataset already exists\n", 1, backend.ErrAlreadyExists},
		{"cannot open 'tank/v': dataset does not exist\n", 1, backend.ErrNotFound},
		{"cannot create 'nope/v': no such pool 'nope'\n", 1, backend.ErrUnavailable},
		{"cannot create 'tank/a/v': parent does not exist\n", 1, backend.ErrUnavailable},
		{"Permission denied the ZFS utilities must be run as root.\n", 1, backend.ErrUnavailable},
		{"The ZFS modules are not loaded.\nTry running 'modprobe zfs' as root to load them.\n", 1, backend.ErrUnavailable},
		{"cannot destroy 'tank/v': dataset is busy\n", 1, backend.ErrInUse},
		{"cannot create 'tank/v': invalid property 'foo'\n", 1, backend.ErrInvalid},
		{"cannot create 'tank/v': 'volblocksize' must be power of 2 from 512B to 16M\n", 1, backend.ErrInvalid},
		{"cannot create 'tank/v': 'compression' must be one of 'on | off'\n", 1, backend.ErrInvalid},
		{"", -1, backend.ErrUnavailable},
		{"something new\n", 1, nil},
	}
	for _, c := range cases {
		ce := &backend.CommandError{Name: "zfs", ExitCode: c.exit, Stderr: c.stderr}
		if c.exit < 0 {
			ce.Err = errors.New("not found")
		}
		got := backend.Classify(classify(ce))
		if got != c.want { //nolint:errorlint // Classify returns the sentinel itself
			t.Errorf("classify(%q) = %v, want %v", c.stderr, got, c.want)
		}
		if !errors.As(classify(ce), new(*backend.CommandError)) {
			t.Errorf("classify(%q) dropped the command error", c.stderr)
		}
	}
}

func TestParamsRefused(t *testing.T) {
	t.Parallel()
	b := newScripted(t)
	for _, p := range []map[string]string{
		{"volsize": "1G"}, {"Bad": "x"}, {"compression": ""}, {"mountpoint": "/x"}, {"a=b": "c"}, {"compression": "lz4\n-o x=y"},
	} {
		_, err := b.CreateVolume(context.Background(), "pvc-1", 16384, p)
		if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), "zfs:") {
			t.Errorf("params %v: %v", p, err)
		}
	}
}

func TestDevicePathRoot(t *testing.T) {
	t.Parallel()
	b := New(Config{Pool: "tank", DeviceRoot: "/sim/dev"}, nil)
	if got := b.DevicePath("v"); got != "/sim/dev/zvol/tank/v" {
		t.Fatalf("DevicePath = %s", got)
	}
}

// A destroy refused with "dataset is busy" (udev probing a zvol its last
// writer just closed) is retried with growing pauses; a zvol still busy
// after the bound is reported in use.
func TestDeleteWaitsOutBusy(t *testing.T) {
	const list = "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-1"
	const busy = "cannot destroy 'tank/k8s/pvc-1': dataset is busy\n"
	const origin = "zfs list -Hp -o origin tank/k8s/pvc-1"
	b := newScripted(t,
		call{Cmd: list, Stdout: "tank/k8s/pvc-1\tvolume\t16384\t16384\n"},
		call{Cmd: origin, Stdout: "-\n"},
		call{Cmd: "zfs destroy tank/k8s/pvc-1", Stderr: busy, Exit: 1},
		call{Cmd: "zfs destroy tank/k8s/pvc-1", Stderr: busy, Exit: 1},
		call{Cmd: "zfs destroy tank/k8s/pvc-1"},
	)
	var slept []time.Duration
	b.sleep = func(_ context.Context, d time.Duration) error { slept = append(slept, d); return nil }
	if err := b.DeleteVolume(context.Background(), "pvc-1"); err != nil {
		t.Fatal(err)
	}
	if len(slept) != 2 || slept[0] != 100*time.Millisecond || slept[1] != 200*time.Millisecond {
		t.Fatalf("pauses %v", slept)
	}

	calls := []call{{Cmd: list, Stdout: "tank/k8s/pvc-1\tvolume\t16384\t16384\n"}, {Cmd: origin, Stdout: "-\n"}}
	for i := 0; i < 4; i++ {
		calls = append(calls, call{Cmd: "zfs destroy tank/k8s/pvc-1", Stderr: busy, Exit: 1})
	}
	b = newScripted(t, calls...)
	b.busyWait = 700 * time.Millisecond // 100+200+400 ms, then give up
	b.sleep = func(context.Context, time.Duration) error { return nil }
	if err := b.DeleteVolume(context.Background(), "pvc-1"); !errors.Is(err, backend.ErrInUse) {
		t.Fatalf("still busy: %v", err)
	}

	// A volume's snapshots are no transient busy: refused at once.
	b = newScripted(t, call{Cmd: list, Stdout: "tank/k8s/pvc-1\tvolume\t16384\t16384\n"}, call{Cmd: origin, Stdout: "-\n"},
		call{Cmd: "zfs destroy tank/k8s/pvc-1", Stderr: "cannot destroy 'tank/k8s/pvc-1': volume has children\n", Exit: 1})
	b.sleep = func(context.Context, time.Duration) error { t.Fatal("waited on a volume's snapshots"); return nil }
	if err := b.DeleteVolume(context.Background(), "pvc-1"); !errors.Is(err, backend.ErrInUse) {
		t.Fatalf("volume with snapshots: %v", err)
	}
}
