// Package backendtest is the one test suite every backend.Backend passes:
// run against the simulated tools in unit tests and against the real
// tools in the qemu run, with the same cases.
package backendtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

const mib = int64(1) << 20

// Fixture is one fresh placement for one test.
type Fixture struct {
	Backend backend.Backend
	// Params are passed to CreateVolume and Capacity.
	Params map[string]string
	// Granule is the unit sizes are rounded up to (volblocksize, extent).
	Granule int64
	// Layout is what Discover must report.
	Layout backend.Layout
	// AddForeign, when set, creates a volume of size bytes named name in
	// the placement the way another user of the pool or group would,
	// outside the backend (an untagged LV in a shared volume group).
	AddForeign func(t *testing.T, name string, size int64)
}

// Target is one backend configuration to exercise.
type Target struct {
	Name string
	// Thin means creating volumes does not consume free space and the
	// pool may be overcommitted.
	Thin bool
	// New returns a fresh, healthy placement with at least 256 MiB free.
	New func(t *testing.T) Fixture
	// Missing returns a backend whose pool or volume group does not exist.
	Missing func(t *testing.T) backend.Backend
	// BadLayout, when set, returns a backend whose pool or group exists
	// but whose configured parent dataset or thin pool does not, and whose
	// default volumes (nil params) are placed in that layout.
	BadLayout func(t *testing.T) backend.Backend
	// DenyDevices, when set, returns a backend on a host where the tools
	// cannot open the storage devices (an unprivileged agent).
	DenyDevices func(t *testing.T) backend.Backend
	// Shared means the placement may hold other users' volumes (an LVM
	// volume group); its fixtures set AddForeign.
	Shared bool
	// BadParams are CreateVolume parameters the backend must refuse.
	BadParams map[string]string
}

type testCase struct {
	name string
	// applies, when set, says whether the case concerns a target.
	applies func(Target) bool
	run     func(t *testing.T, tg Target, f Fixture)
}

// Exercise runs every case that concerns a target against it, each case
// on a fresh fixture.
func Exercise(t *testing.T, targets ...Target) {
	for _, tg := range targets {
		t.Run(tg.Name, func(t *testing.T) {
			t.Parallel()
			for _, tc := range cases {
				if tc.applies != nil && !tc.applies(tg) {
					continue
				}
				t.Run(tc.name, func(t *testing.T) {
					t.Parallel()
					tc.run(t, tg, tg.New(t))
				})
			}
		})
	}
}

// waitDevice waits for a volume's device node: DevicePath is computed, and
// on a real kernel udev creates zvol links asynchronously (the agent waits
// the same way before exporting).
func waitDevice(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(path); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("device %s did not appear within 10s", path)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitDeviceGone waits for a deleted volume's device node to go (udev
// removes zvol links asynchronously too).
func waitDeviceGone(t *testing.T, path string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := os.Stat(path)
		if errors.Is(err, os.ErrNotExist) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("device of a deleted volume %s still there after 10s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func thick(tg Target) bool { return !tg.Thin }
func thin(tg Target) bool  { return tg.Thin }

// wantErr checks that err carries the sentinel want.
func wantErr(t *testing.T, what string, err, want error) {
	t.Helper()
	if !errors.Is(err, want) {
		t.Fatalf("%s: got error %v, want %v", what, err, want)
	}
}

func must[T any](t *testing.T, what string) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return v
	}
}

func create(t *testing.T, f Fixture, name string, size int64) backend.Volume {
	t.Helper()
	v, err := f.Backend.CreateVolume(context.Background(), name, size, f.Params)
	if err != nil {
		t.Fatalf("CreateVolume(%s, %d): %v", name, size, err)
	}
	return v
}

func capacity(t *testing.T, f Fixture) backend.Capacity {
	t.Helper()
	c, err := f.Backend.Capacity(context.Background(), f.Params)
	if err != nil {
		t.Fatalf("Capacity: %v", err)
	}
	return c
}

func names(vols []backend.Volume) string {
	var n []string
	for _, v := range vols {
		n = append(n, fmt.Sprintf("%s:%d", v.Name, v.SizeBytes))
	}
	return strings.Join(n, ",")
}

// readAt reads n bytes of a volume's device at off.
func readAt(t *testing.T, path string, off int64, n int) []byte {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	b := make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		t.Fatalf("read %s at %d: %v", path, off, err)
	}
	return b
}

func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_SYNC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", path, err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatalf("write %s at %d: %v", path, off, err)
	}
}

var cases = []testCase{
	{name: "a new volume never reads what a deleted one wrote", run: func(t *testing.T, _ Target, f Fixture) {
		// Offsets past the 4 KiB lvcreate zeroes by itself, spread over the
		// volume; the same size, so a linear LV lands on the same extents.
		secret := []byte("previous tenant's data")
		offs := []int64{1 * mib, 17*mib + 512, 31 * mib}
		old := create(t, f, "tenant-a", 32*mib)
		waitDevice(t, old.DevicePath)
		for _, off := range offs {
			writeAt(t, old.DevicePath, off, secret)
		}
		if err := f.Backend.DeleteVolume(context.Background(), "tenant-a"); err != nil {
			t.Fatalf("DeleteVolume: %v", err)
		}
		waitDeviceGone(t, old.DevicePath)
		v := create(t, f, "tenant-b", 32*mib)
		waitDevice(t, v.DevicePath)
		for _, off := range offs {
			if got := readAt(t, v.DevicePath, off, len(secret)); !bytes.Equal(got, make([]byte, len(secret))) {
				t.Fatalf("new volume reads %q at %d, want zeros", got, off)
			}
		}
	}},
	{name: "volumes the backend did not create are left alone", applies: func(tg Target) bool { return tg.Shared }, run: func(t *testing.T, _ Target, f Fixture) {
		f.AddForeign(t, "foreign", 8*mib)
		create(t, f, "mine", 8*mib)
		vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(context.Background()))
		if names(vols) != "mine:"+fmt.Sprint(vols[0].SizeBytes) || len(vols) != 1 {
			t.Fatalf("ListVolumes = %s, want only the backend's own volume", names(vols))
		}
		_, err := f.Backend.GetVolume(context.Background(), "foreign")
		wantErr(t, "GetVolume of a foreign volume", err, backend.ErrNotFound)
		_, err = f.Backend.CreateVolume(context.Background(), "foreign", 8*mib, f.Params)
		wantErr(t, "CreateVolume over a foreign volume", err, backend.ErrNotOwned)
		_, err = f.Backend.ExpandVolume(context.Background(), "foreign", 16*mib)
		wantErr(t, "ExpandVolume of a foreign volume", err, backend.ErrNotOwned)
		err = f.Backend.DeleteVolume(context.Background(), "foreign")
		wantErr(t, "DeleteVolume of a foreign volume", err, backend.ErrNotOwned)
		if _, err := os.Stat(f.Backend.DevicePath("foreign")); err != nil {
			t.Fatalf("the foreign volume's device is gone: %v", err)
		}
	}},
	{name: "create rounds the size up to the granule", run: func(t *testing.T, _ Target, f Fixture) {
		req := 64*mib + 1
		v := create(t, f, "round", req)
		if want := backend.RoundUp(req, f.Granule); v.SizeBytes != want {
			t.Fatalf("size = %d, want %d (granule %d)", v.SizeBytes, want, f.Granule)
		}
		if v.Name != "round" || v.DevicePath != f.Backend.DevicePath("round") {
			t.Fatalf("volume = %+v", v)
		}
		got := must[backend.Volume](t, "GetVolume")(f.Backend.GetVolume(context.Background(), "round"))
		if got != v {
			t.Fatalf("GetVolume = %+v, CreateVolume returned %+v", got, v)
		}
	}},
	{name: "create is idempotent for sizes that round alike", run: func(t *testing.T, _ Target, f Fixture) {
		first := create(t, f, "same", 32*mib)
		again := create(t, f, "same", 32*mib)
		if again != first {
			t.Fatalf("second create = %+v, first %+v", again, first)
		}
		// A request one byte above the previous granule rounds to the same
		// size, so it names the same volume.
		near := create(t, f, "same", 32*mib-f.Granule+1)
		if near != first {
			t.Fatalf("create with a size rounding alike = %+v, first %+v", near, first)
		}
		vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(context.Background()))
		if len(vols) != 1 {
			t.Fatalf("volumes = %s, want one", names(vols))
		}
	}},
	{name: "create with another size is AlreadyExists", run: func(t *testing.T, _ Target, f Fixture) {
		create(t, f, "taken", 32*mib)
		_, err := f.Backend.CreateVolume(context.Background(), "taken", 64*mib, f.Params)
		wantErr(t, "create with a larger size", err, backend.ErrAlreadyExists)
		_, err = f.Backend.CreateVolume(context.Background(), "taken", 16*mib, f.Params)
		wantErr(t, "create with a smaller size", err, backend.ErrAlreadyExists)
		v := must[backend.Volume](t, "GetVolume")(f.Backend.GetVolume(context.Background(), "taken"))
		if v.SizeBytes != 32*mib {
			t.Fatalf("existing volume changed: %+v", v)
		}
	}},
	{name: "create refuses bad names, sizes and parameters", run: func(t *testing.T, tg Target, f Fixture) {
		ctx := context.Background()
		for _, name := range []string{"", "a/b", "-x", ".", "..", "has space", "über", strings.Repeat("n", 128)} {
			_, err := f.Backend.CreateVolume(ctx, name, 16*mib, f.Params)
			wantErr(t, fmt.Sprintf("create %q", name), err, backend.ErrInvalid)
		}
		for _, size := range []int64{0, -1} {
			_, err := f.Backend.CreateVolume(ctx, "sized", size, f.Params)
			wantErr(t, fmt.Sprintf("create size %d", size), err, backend.ErrInvalid)
		}
		if tg.BadParams != nil {
			_, err := f.Backend.CreateVolume(ctx, "params", 16*mib, tg.BadParams)
			wantErr(t, fmt.Sprintf("create with %v", tg.BadParams), err, backend.ErrInvalid)
		}
		vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx))
		if len(vols) != 0 {
			t.Fatalf("refused creates left volumes: %s", names(vols))
		}
	}},
	{name: "get and list", run: func(t *testing.T, _ Target, f Fixture) {
		ctx := context.Background()
		vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx))
		if vols == nil || len(vols) != 0 {
			t.Fatalf("fresh placement lists %#v, want an empty list", vols)
		}
		for _, n := range []string{"vol-b", "vol-a", "vol-c"} {
			create(t, f, n, 16*mib)
		}
		vols = must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx))
		want := fmt.Sprintf("vol-a:%d,vol-b:%d,vol-c:%d", 16*mib, 16*mib, 16*mib)
		if got := names(vols); got != want {
			t.Fatalf("ListVolumes = %s, want %s", got, want)
		}
		for _, v := range vols {
			if v.DevicePath != f.Backend.DevicePath(v.Name) || v.Native == "" {
				t.Errorf("listed volume %+v", v)
			}
		}
		_, err := f.Backend.GetVolume(ctx, "vol-z")
		wantErr(t, "GetVolume(missing)", err, backend.ErrNotFound)
	}},
	{name: "capacity accounts for volumes", run: func(t *testing.T, tg Target, f Fixture) {
		before := capacity(t, f)
		if before.TotalBytes <= 0 || before.FreeBytes <= 0 || before.FreeBytes > before.TotalBytes {
			t.Fatalf("capacity %+v", before)
		}
		v := create(t, f, "cap", 64*mib)
		during := capacity(t, f)
		if during.TotalBytes != before.TotalBytes {
			t.Fatalf("total changed from %d to %d", before.TotalBytes, during.TotalBytes)
		}
		if tg.Thin {
			if during.FreeBytes != before.FreeBytes {
				t.Fatalf("an unwritten thin volume took space: free %d -> %d", before.FreeBytes, during.FreeBytes)
			}
		} else if before.FreeBytes-during.FreeBytes < v.SizeBytes {
			t.Fatalf("free went from %d to %d for a %d-byte volume", before.FreeBytes, during.FreeBytes, v.SizeBytes)
		}
		if err := f.Backend.DeleteVolume(context.Background(), "cap"); err != nil {
			t.Fatal(err)
		}
		// Real ZFS frees a destroyed zvol's blocks asynchronously and
		// keeps a few KiB of metadata for a while: the space comes back
		// within seconds, to within 1 MiB.
		deadline := time.Now().Add(30 * time.Second)
		for {
			after := capacity(t, f)
			if after.TotalBytes == before.TotalBytes && before.FreeBytes-after.FreeBytes < mib {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("capacity after delete %+v, before create %+v", after, before)
			}
			time.Sleep(200 * time.Millisecond)
		}
	}},
	{name: "create beyond free space is ResourceExhausted", applies: thick, run: func(t *testing.T, _ Target, f Fixture) {
		c := capacity(t, f)
		_, err := f.Backend.CreateVolume(context.Background(), "huge", c.FreeBytes+f.Granule, f.Params)
		wantErr(t, "create beyond free space", err, backend.ErrResourceExhausted)
		if _, err := f.Backend.GetVolume(context.Background(), "huge"); !errors.Is(err, backend.ErrNotFound) {
			t.Fatalf("failed create left a volume: %v", err)
		}
	}},
	{name: "thin volumes may overcommit the pool", applies: thin, run: func(t *testing.T, _ Target, f Fixture) {
		c := capacity(t, f)
		v := create(t, f, "big", c.TotalBytes*2)
		if v.SizeBytes < c.TotalBytes*2 {
			t.Fatalf("size %d", v.SizeBytes)
		}
	}},
	{name: "expand grows, rounds up and never shrinks", run: func(t *testing.T, _ Target, f Fixture) {
		ctx := context.Background()
		create(t, f, "grow", 32*mib)
		req := 48*mib + 1
		v := must[backend.Volume](t, "ExpandVolume")(f.Backend.ExpandVolume(ctx, "grow", req))
		if want := backend.RoundUp(req, f.Granule); v.SizeBytes != want {
			t.Fatalf("expanded size %d, want %d", v.SizeBytes, want)
		}
		for _, smaller := range []int64{v.SizeBytes, 16 * mib} {
			same := must[backend.Volume](t, "ExpandVolume(smaller)")(f.Backend.ExpandVolume(ctx, "grow", smaller))
			if same != v {
				t.Fatalf("expand to %d = %+v, want unchanged %+v", smaller, same, v)
			}
		}
		got := must[backend.Volume](t, "GetVolume")(f.Backend.GetVolume(ctx, "grow"))
		if got != v {
			t.Fatalf("GetVolume after expand = %+v, want %+v", got, v)
		}
		_, err := f.Backend.ExpandVolume(ctx, "absent", 64*mib)
		wantErr(t, "expand a missing volume", err, backend.ErrNotFound)
		_, err = f.Backend.ExpandVolume(ctx, "grow", 0)
		wantErr(t, "expand to 0", err, backend.ErrInvalid)
	}},
	{name: "expand beyond free space is ResourceExhausted", applies: thick, run: func(t *testing.T, _ Target, f Fixture) {
		ctx := context.Background()
		v := create(t, f, "full", 16*mib)
		c := capacity(t, f)
		_, err := f.Backend.ExpandVolume(ctx, "full", v.SizeBytes+c.FreeBytes+f.Granule)
		wantErr(t, "expand beyond free space", err, backend.ErrResourceExhausted)
		if got := must[backend.Volume](t, "GetVolume")(f.Backend.GetVolume(ctx, "full")); got != v {
			t.Fatalf("failed expand changed the volume: %+v", got)
		}
	}},
	{name: "delete is idempotent", run: func(t *testing.T, _ Target, f Fixture) {
		ctx := context.Background()
		v := create(t, f, "gone", 16*mib)
		create(t, f, "kept", 16*mib)
		waitDevice(t, v.DevicePath)
		for i := 0; i < 2; i++ {
			if err := f.Backend.DeleteVolume(ctx, "gone"); err != nil {
				t.Fatalf("delete #%d: %v", i+1, err)
			}
		}
		waitDeviceGone(t, v.DevicePath)
		_, err := f.Backend.GetVolume(ctx, "gone")
		wantErr(t, "GetVolume(deleted)", err, backend.ErrNotFound)
		vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx))
		if got := names(vols); got != fmt.Sprintf("kept:%d", 16*mib) {
			t.Fatalf("volumes after delete: %s", got)
		}
		if err := f.Backend.DeleteVolume(ctx, "never-created"); err != nil {
			t.Fatalf("delete of a never-created volume: %v", err)
		}
		wantErr(t, "delete a bad name", f.Backend.DeleteVolume(ctx, "a/b"), backend.ErrInvalid)
	}},
	{name: "data survives expansion", run: func(t *testing.T, _ Target, f Fixture) {
		ctx := context.Background()
		v := create(t, f, "data", 16*mib)
		head := bytes.Repeat([]byte("pillar"), 700)
		tail := bytes.Repeat([]byte("volume"), 700)
		waitDevice(t, v.DevicePath)
		dev, err := os.OpenFile(v.DevicePath, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err1 := dev.WriteAt(head, 0)
		_, err2 := dev.WriteAt(tail, v.SizeBytes-int64(len(tail)))
		if err := errors.Join(err1, err2, dev.Sync(), dev.Close()); err != nil {
			t.Fatal(err)
		}
		grown := must[backend.Volume](t, "ExpandVolume")(f.Backend.ExpandVolume(ctx, "data", 32*mib))
		dev, err = os.Open(grown.DevicePath)
		if err != nil {
			t.Fatal(err)
		}
		defer dev.Close()
		gotHead, gotTail := make([]byte, len(head)), make([]byte, len(tail))
		_, err1 = dev.ReadAt(gotHead, 0)
		_, err2 = dev.ReadAt(gotTail, v.SizeBytes-int64(len(tail)))
		if err := errors.Join(err1, err2); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(gotHead, head) || !bytes.Equal(gotTail, tail) {
			t.Fatal("data changed across expansion")
		}
	}},
	{name: "concurrent creates of one name converge", run: func(t *testing.T, _ Target, f Fixture) {
		var wg sync.WaitGroup
		results := make([]backend.Volume, 4)
		errs := make([]error, 4)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = f.Backend.CreateVolume(context.Background(), "raced", 16*mib, f.Params)
			}()
		}
		wg.Wait()
		for i := range results {
			if errs[i] != nil {
				t.Fatalf("create #%d: %v", i, errs[i])
			}
			if results[i] != results[0] {
				t.Fatalf("create #%d = %+v, #0 = %+v", i, results[i], results[0])
			}
		}
	}},
	// S-AG-9: the layout Discover reports is the configured one, verified
	// to exist; the controller compares it with the store resource.
	{name: "S-AG-9 discover reports layout, health and capacity", run: func(t *testing.T, tg Target, f Fixture) {
		p := f.Backend.Discover(context.Background())
		if !p.Discovered || !p.Healthy || p.Reason != "" {
			t.Fatalf("Discover = %+v, want discovered and healthy", p)
		}
		if p.Name != f.Backend.Name() || p.Kind != f.Backend.Kind() {
			t.Fatalf("Discover names %s/%s, backend is %s/%s", p.Kind, p.Name, f.Backend.Kind(), f.Backend.Name())
		}
		if p.Layout != f.Layout || f.Backend.Layout() != f.Layout {
			t.Fatalf("layout %+v (backend says %+v), want %+v", p.Layout, f.Backend.Layout(), f.Layout)
		}
		// Other cases run beside this one and ZFS frees space
		// asynchronously, so the free figure may move between the two
		// reads; the total may not, and the free one only a little.
		if want := capacity(t, f); f.Params == nil {
			d := p.Capacity.FreeBytes - want.FreeBytes
			if p.Capacity.TotalBytes != want.TotalBytes || d > want.TotalBytes/100 || -d > want.TotalBytes/100 {
				t.Fatalf("discovered capacity %+v, Capacity() %+v", p.Capacity, want)
			}
		}
		if p.Capacity.TotalBytes <= 0 {
			t.Fatalf("discovered capacity %+v", p.Capacity)
		}
	}},
	{name: "missing pool degrades discovery and makes operations Unavailable", run: func(t *testing.T, tg Target, _ Fixture) {
		b := tg.Missing(t)
		ctx := context.Background()
		p := b.Discover(ctx)
		if p.Discovered || p.Healthy || !strings.Contains(p.Reason, b.Name()) || !strings.Contains(p.Reason, "not found") {
			t.Fatalf("Discover = %+v, want not discovered with a reason naming %s", p, b.Name())
		}
		_, err := b.CreateVolume(ctx, "v", 16*mib, nil)
		wantErr(t, "CreateVolume", err, backend.ErrUnavailable)
		_, err = b.GetVolume(ctx, "v")
		wantErr(t, "GetVolume", err, backend.ErrUnavailable)
		_, err = b.ListVolumes(ctx)
		wantErr(t, "ListVolumes", err, backend.ErrUnavailable)
		_, err = b.ExpandVolume(ctx, "v", 32*mib)
		wantErr(t, "ExpandVolume", err, backend.ErrUnavailable)
		wantErr(t, "DeleteVolume", b.DeleteVolume(ctx, "v"), backend.ErrUnavailable)
		_, err = b.Capacity(ctx, nil)
		wantErr(t, "Capacity", err, backend.ErrUnavailable)
	}},
	// S-AG-9: a configured layout that is not there is reported, and
	// volumes are not placed elsewhere.
	{name: "S-AG-9 missing layout degrades discovery", applies: func(tg Target) bool { return tg.BadLayout != nil }, run: func(t *testing.T, tg Target, _ Fixture) {
		b := tg.BadLayout(t)
		ctx := context.Background()
		p := b.Discover(ctx)
		layout := b.Layout().ParentDataset + b.Layout().ThinPool
		if p.Discovered || p.Healthy || !strings.Contains(p.Reason, layout) {
			t.Fatalf("Discover = %+v, want not discovered with a reason naming %q", p, layout)
		}
		if p.Layout != b.Layout() {
			t.Fatalf("layout %+v, configured %+v", p.Layout, b.Layout())
		}
		_, err := b.CreateVolume(ctx, "v", 16*mib, nil)
		wantErr(t, "CreateVolume", err, backend.ErrUnavailable)
	}},
	// S-AG-12: without device access the pool is not discovered and the
	// reason says so.
	{name: "S-AG-12 denied devices degrade discovery", applies: func(tg Target) bool { return tg.DenyDevices != nil }, run: func(t *testing.T, tg Target, _ Fixture) {
		b := tg.DenyDevices(t)
		ctx := context.Background()
		p := b.Discover(ctx)
		if p.Discovered || p.Healthy || !strings.Contains(p.Reason, "privileged") {
			t.Fatalf("Discover = %+v, want not discovered with a reason about privileges", p)
		}
		_, err := b.CreateVolume(ctx, "v", 16*mib, nil)
		wantErr(t, "CreateVolume", err, backend.ErrUnavailable)
		_, err = b.ListVolumes(ctx)
		wantErr(t, "ListVolumes", err, backend.ErrUnavailable)
	}},
}
