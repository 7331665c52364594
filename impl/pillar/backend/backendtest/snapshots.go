package backendtest

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// Snapshot semantics differ by backend (docs/decisions.md, "Snapshots and
// clones"): ZFS clones depend on their origin snapshot, so a volume with
// snapshots is ErrInUse until they go, and a snapshot with restored volumes
// is deleted at once for every caller while ZFS keeps it (deferred
// destroy) until the last of them goes, holding its source volume until
// then; LVM thin snapshots are independent of their origin; linear LVs
// have no snapshots at all.
type snapshotKind int

const (
	snapshotsRefused snapshotKind = iota
	snapshotsDependent
	snapshotsIndependent
)

func snapshotsOf(tg Target, f Fixture) snapshotKind {
	switch {
	case f.Backend.Kind() == backend.KindZFS:
		return snapshotsDependent
	case tg.Thin:
		return snapshotsIndependent
	}
	return snapshotsRefused
}

// withSnapshots runs a case only where snapshots are offered.
func withSnapshots(run func(t *testing.T, tg Target, f Fixture, kind snapshotKind)) func(*testing.T, Target, Fixture) {
	return func(t *testing.T, tg Target, f Fixture) {
		kind := snapshotsOf(tg, f)
		if kind == snapshotsRefused {
			t.Skip("linear LVM offers no snapshots; the refusal has its own case")
		}
		run(t, tg, f, kind)
	}
}

func snapshot(t *testing.T, f Fixture, name, source string) backend.Snapshot {
	t.Helper()
	s, err := f.Backend.CreateSnapshot(context.Background(), name, source)
	if err != nil {
		t.Fatalf("CreateSnapshot(%s of %s): %v", name, source, err)
	}
	return s
}

func createFrom(t *testing.T, f Fixture, name string, size int64, src backend.Source) backend.Volume {
	t.Helper()
	v, err := f.Backend.CreateVolumeFrom(context.Background(), name, size, src, f.Params)
	if err != nil {
		t.Fatalf("CreateVolumeFrom(%s, %d, %s): %v", name, size, src, err)
	}
	return v
}

func wantData(t *testing.T, v backend.Volume, off int64, want []byte) {
	t.Helper()
	waitDevice(t, v.DevicePath)
	if got := readAt(t, v.DevicePath, off, len(want)); !bytes.Equal(got, want) {
		t.Fatalf("%s reads %q at %d, want %q", v.Name, got, off, want)
	}
}

var (
	before = []byte("written before the snapshot")
	after  = []byte("written after the snapshot!")
	zeros  = make([]byte, len(before))
)

func init() {
	cases = append(cases, snapshotCases...)
}

var snapshotCases = []testCase{
	{name: "a volume restored from a snapshot has the data written before it", run: withSnapshots(func(t *testing.T, _ Target, f Fixture, _ snapshotKind) {
		ctx := context.Background()
		src := create(t, f, "src", 32*mib)
		waitDevice(t, src.DevicePath)
		writeAt(t, src.DevicePath, 1*mib, before)
		writeAt(t, src.DevicePath, 20*mib, before)
		s := snapshot(t, f, "snap-1", "src")
		if s.Name != "snap-1" || s.SourceVolume != "src" || s.SizeBytes != src.SizeBytes || s.CreatedAt.IsZero() || s.Native == "" {
			t.Fatalf("snapshot = %+v, source %+v", s, src)
		}
		writeAt(t, src.DevicePath, 1*mib, after)
		writeAt(t, src.DevicePath, 5*mib, after)

		r := createFrom(t, f, "restored", 0, backend.Source{Snapshot: "snap-1"})
		if r.SizeBytes != src.SizeBytes || r.DevicePath != f.Backend.DevicePath("restored") {
			t.Fatalf("restored volume %+v, source %+v", r, src)
		}
		wantData(t, r, 1*mib, before)
		wantData(t, r, 20*mib, before)
		wantData(t, r, 5*mib, zeros)
		wantData(t, src, 1*mib, after)

		big := createFrom(t, f, "restored-big", 48*mib+1, backend.Source{Snapshot: "snap-1"})
		if want := backend.RoundUp(48*mib+1, f.Granule); big.SizeBytes != want {
			t.Fatalf("restored into %d bytes, want %d", big.SizeBytes, want)
		}
		wantData(t, big, 20*mib, before)

		again := createFrom(t, f, "restored", 0, backend.Source{Snapshot: "snap-1"})
		if again != r {
			t.Fatalf("second restore = %+v, first %+v", again, r)
		}
		_, err := f.Backend.CreateVolumeFrom(ctx, "restored", 0, backend.Source{Volume: "src"}, f.Params)
		wantErr(t, "the same name from another source", err, backend.ErrAlreadyExists)
		_, err = f.Backend.CreateVolumeFrom(ctx, "small", 16*mib, backend.Source{Snapshot: "snap-1"}, f.Params)
		wantErr(t, "a volume smaller than the snapshot", err, backend.ErrOutOfRange)
		_, err = f.Backend.CreateVolumeFrom(ctx, "none", 0, backend.Source{Snapshot: "absent"}, f.Params)
		wantErr(t, "a volume from a missing snapshot", err, backend.ErrNotFound)

		got := must[backend.Snapshot](t, "GetSnapshot")(f.Backend.GetSnapshot(ctx, "snap-1"))
		if got != s {
			t.Fatalf("GetSnapshot = %+v, CreateSnapshot returned %+v", got, s)
		}
		snaps := must[[]backend.Snapshot](t, "ListSnapshots")(f.Backend.ListSnapshots(ctx))
		if len(snaps) != 1 || snaps[0] != s {
			t.Fatalf("ListSnapshots = %+v, want only %+v", snaps, s)
		}
		vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx))
		if len(vols) != 3 || vols[0].Name != "restored" || vols[1].Name != "restored-big" || vols[2].Name != "src" {
			t.Fatalf("ListVolumes = %s, want the source and the restored volumes, no snapshot", names(vols))
		}
	})},
	{name: "snapshots are idempotent by name and source", run: withSnapshots(func(t *testing.T, _ Target, f Fixture, _ snapshotKind) {
		ctx := context.Background()
		create(t, f, "one", 16*mib)
		create(t, f, "two", 16*mib)
		first := snapshot(t, f, "snap", "one")
		if again := snapshot(t, f, "snap", "one"); again != first {
			t.Fatalf("second create = %+v, first %+v", again, first)
		}
		_, err := f.Backend.CreateSnapshot(ctx, "snap", "two")
		wantErr(t, "the same snapshot name of another volume", err, backend.ErrAlreadyExists)
		_, err = f.Backend.CreateSnapshot(ctx, "other", "absent")
		wantErr(t, "a snapshot of a missing volume", err, backend.ErrNotFound)
		for _, bad := range []string{"", "a/b", "a@b", "-x", backend.HiddenSnapshotPrefix + "x"} {
			_, err = f.Backend.CreateSnapshot(ctx, bad, "one")
			wantErr(t, "snapshot name "+bad, err, backend.ErrInvalid)
		}
		for i := 0; i < 2; i++ {
			if err := f.Backend.DeleteSnapshot(ctx, "snap"); err != nil {
				t.Fatalf("DeleteSnapshot #%d: %v", i+1, err)
			}
		}
		_, err = f.Backend.GetSnapshot(ctx, "snap")
		wantErr(t, "GetSnapshot after delete", err, backend.ErrNotFound)
		if err := f.Backend.DeleteSnapshot(ctx, "never-taken"); err != nil {
			t.Fatalf("DeleteSnapshot of a never-taken snapshot: %v", err)
		}
		if snaps := must[[]backend.Snapshot](t, "ListSnapshots")(f.Backend.ListSnapshots(ctx)); snaps == nil || len(snaps) != 0 {
			t.Fatalf("ListSnapshots = %#v, want an empty list", snaps)
		}
		if vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx)); len(vols) != 2 {
			t.Fatalf("volumes changed: %s", names(vols))
		}
	})},
	{name: "a clone has its source's data at the time of cloning", run: withSnapshots(func(t *testing.T, _ Target, f Fixture, kind snapshotKind) {
		ctx := context.Background()
		src := create(t, f, "origin", 32*mib)
		waitDevice(t, src.DevicePath)
		writeAt(t, src.DevicePath, 3*mib, before)
		c := createFrom(t, f, "copy", 0, backend.Source{Volume: "origin"})
		if c.SizeBytes != src.SizeBytes {
			t.Fatalf("clone %+v of %+v", c, src)
		}
		writeAt(t, src.DevicePath, 3*mib, after)
		wantData(t, c, 3*mib, before)
		if again := createFrom(t, f, "copy", 0, backend.Source{Volume: "origin"}); again != c {
			t.Fatalf("second clone = %+v, first %+v", again, c)
		}
		if snaps := must[[]backend.Snapshot](t, "ListSnapshots")(f.Backend.ListSnapshots(ctx)); len(snaps) != 0 {
			t.Fatalf("a clone left visible snapshots: %+v", snaps)
		}
		if kind == snapshotsDependent {
			wantErr(t, "DeleteVolume of a volume with a clone", f.Backend.DeleteVolume(ctx, "origin"), backend.ErrInUse)
			must[backend.Volume](t, "GetVolume(origin)")(f.Backend.GetVolume(ctx, "origin"))
			if err := f.Backend.DeleteVolume(ctx, "copy"); err != nil {
				t.Fatalf("DeleteVolume(copy): %v", err)
			}
			if err := f.Backend.DeleteVolume(ctx, "origin"); err != nil {
				t.Fatalf("DeleteVolume(origin) once its clone is gone: %v", err)
			}
		} else {
			if err := f.Backend.DeleteVolume(ctx, "origin"); err != nil {
				t.Fatalf("DeleteVolume(origin) with a clone: %v", err)
			}
			wantData(t, c, 3*mib, before)
			if err := f.Backend.DeleteVolume(ctx, "copy"); err != nil {
				t.Fatalf("DeleteVolume(copy): %v", err)
			}
		}
		if vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx)); len(vols) != 0 {
			t.Fatalf("volumes left: %s", names(vols))
		}
	})},
	{name: "deleting a snapshot's source or restored volumes behaves as documented", run: withSnapshots(func(t *testing.T, _ Target, f Fixture, kind snapshotKind) {
		ctx := context.Background()
		src := create(t, f, "base", 16*mib)
		waitDevice(t, src.DevicePath)
		writeAt(t, src.DevicePath, 2*mib, before)
		snapshot(t, f, "kept", "base")
		r := createFrom(t, f, "from-kept", 0, backend.Source{Snapshot: "kept"})
		if kind == snapshotsDependent {
			wantErr(t, "DeleteVolume of a volume with snapshots", f.Backend.DeleteVolume(ctx, "base"), backend.ErrInUse)
			for i := 0; i < 2; i++ {
				if err := f.Backend.DeleteSnapshot(ctx, "kept"); err != nil {
					t.Fatalf("DeleteSnapshot #%d of a snapshot with a restored volume: %v", i+1, err)
				}
			}
			_, err := f.Backend.GetSnapshot(ctx, "kept")
			wantErr(t, "GetSnapshot of a deleted snapshot kept for its clone", err, backend.ErrNotFound)
			if snaps := must[[]backend.Snapshot](t, "ListSnapshots")(f.Backend.ListSnapshots(ctx)); len(snaps) != 0 {
				t.Fatalf("ListSnapshots after delete = %+v, want none", snaps)
			}
			_, err = f.Backend.CreateVolumeFrom(ctx, "from-deleted", 0, backend.Source{Snapshot: "kept"}, f.Params)
			wantErr(t, "a restore from a deleted snapshot", err, backend.ErrNotFound)
			_, err = f.Backend.CreateSnapshot(ctx, "kept", "base")
			wantErr(t, "the name of a deleted snapshot ZFS still keeps", err, backend.ErrAlreadyExists)
			wantData(t, r, 2*mib, before)
			// ZFS keeps the snapshot for its clone, so the source waits.
			wantErr(t, "DeleteVolume of the source of a kept snapshot", f.Backend.DeleteVolume(ctx, "base"), backend.ErrInUse)
			wantData(t, src, 2*mib, before)
			if err := f.Backend.DeleteVolume(ctx, "from-kept"); err != nil {
				t.Fatalf("DeleteVolume of the restored volume: %v", err)
			}
			// Its last clone gone, ZFS destroyed the snapshot: the source
			// has no dependents left.
			if err := f.Backend.DeleteVolume(ctx, "base"); err != nil {
				t.Fatalf("DeleteVolume of the source once the restored volume went: %v", err)
			}
			if vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx)); len(vols) != 0 {
				t.Fatalf("volumes left: %s", names(vols))
			}
			return
		}
		if err := f.Backend.DeleteVolume(ctx, "base"); err != nil {
			t.Fatalf("DeleteVolume of a thin volume with snapshots: %v", err)
		}
		s := must[backend.Snapshot](t, "GetSnapshot")(f.Backend.GetSnapshot(ctx, "kept"))
		if s.SourceVolume != "base" {
			t.Fatalf("snapshot after its source went: %+v", s)
		}
		late := createFrom(t, f, "from-orphan", 0, backend.Source{Snapshot: "kept"})
		wantData(t, late, 2*mib, before)
		if err := f.Backend.DeleteSnapshot(ctx, "kept"); err != nil {
			t.Fatalf("DeleteSnapshot with restored volumes: %v", err)
		}
		wantData(t, r, 2*mib, before)
	})},
	{name: "linear volumes refuse snapshots and clones", applies: thick, run: func(t *testing.T, tg Target, f Fixture) {
		if snapshotsOf(tg, f) != snapshotsRefused {
			t.Skip("this target offers snapshots")
		}
		ctx := context.Background()
		create(t, f, "flat", 16*mib)
		_, err := f.Backend.CreateSnapshot(ctx, "flat-snap", "flat")
		wantErr(t, "CreateSnapshot of a linear volume", err, backend.ErrInvalid)
		_, err = f.Backend.CreateVolumeFrom(ctx, "flat-copy", 0, backend.Source{Volume: "flat"}, f.Params)
		wantErr(t, "a clone of a linear volume", err, backend.ErrInvalid)
		if snaps := must[[]backend.Snapshot](t, "ListSnapshots")(f.Backend.ListSnapshots(ctx)); len(snaps) != 0 {
			t.Fatalf("snapshots: %+v", snaps)
		}
		if vols := must[[]backend.Volume](t, "ListVolumes")(f.Backend.ListVolumes(ctx)); len(vols) != 1 {
			t.Fatalf("volumes: %s", names(vols))
		}
	}},
	{name: "snapshots of a missing pool are Unavailable", run: func(t *testing.T, tg Target, _ Fixture) {
		b := tg.Missing(t)
		ctx := context.Background()
		_, err := b.ListSnapshots(ctx)
		wantErr(t, "ListSnapshots", err, backend.ErrUnavailable)
		_, err = b.CreateSnapshot(ctx, "s", "v")
		wantErr(t, "CreateSnapshot", err, backend.ErrUnavailable)
		if err := b.DeleteSnapshot(ctx, "s"); !errors.Is(err, backend.ErrUnavailable) {
			t.Fatalf("DeleteSnapshot: %v, want Unavailable", err)
		}
	}},
}
