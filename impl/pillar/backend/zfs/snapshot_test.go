package zfs

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// A clone of a volume: a hidden snapshot, zfs clone (volblocksize left to
// the origin), grown to the request; deleting it destroys the hidden
// snapshot too. The command lines match the real zfs(8).
func TestCloneVolumeCommands(t *testing.T) {
	t.Parallel()
	const listSrc = "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-src"
	const listNew = "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-new"
	const origin = "tank/k8s/pvc-src@pillar-clone-pvc-new"
	b := newScripted(t,
		call{Cmd: listSrc, Stdout: "tank/k8s/pvc-src\tvolume\t1048576\t8192\n"},
		call{Cmd: listNew, Stderr: "cannot open 'tank/k8s/pvc-new': dataset does not exist\n", Exit: 1},
		call{Cmd: "zfs snapshot " + origin},
		call{Cmd: "zfs clone -o compression=lz4 " + origin + " tank/k8s/pvc-new"},
		call{Cmd: listNew, Stdout: "tank/k8s/pvc-new\tvolume\t1048576\t8192\n"},
		call{Cmd: "zfs list -Hp -o origin tank/k8s/pvc-new", Stdout: origin + "\n"},
		call{Cmd: "zfs set volsize=2097152 tank/k8s/pvc-new"},
		call{Cmd: listNew, Stdout: "tank/k8s/pvc-new\tvolume\t2097152\t8192\n"},
		// Delete: the clone, then its hidden origin.
		call{Cmd: listNew, Stdout: "tank/k8s/pvc-new\tvolume\t2097152\t8192\n"},
		call{Cmd: "zfs list -Hp -o origin tank/k8s/pvc-new", Stdout: origin + "\n"},
		call{Cmd: "zfs destroy tank/k8s/pvc-new"},
		call{Cmd: "zfs destroy " + origin},
		// Deleting the source while a snapshot depends on it.
		call{Cmd: listSrc, Stdout: "tank/k8s/pvc-src\tvolume\t1048576\t8192\n"},
		call{Cmd: "zfs list -Hp -o origin tank/k8s/pvc-src", Stdout: "-\n"},
		call{Cmd: "zfs destroy tank/k8s/pvc-src", Stderr: "cannot destroy 'tank/k8s/pvc-src': volume has children\nuse '-r' to destroy the following datasets:\ntank/k8s/pvc-src@snap-1\n", Exit: 1},
	)
	v, err := b.CreateVolumeFrom(context.Background(), "pvc-new", 2<<20, backend.Source{Volume: "pvc-src"}, map[string]string{"volblocksize": "8K", "compression": "lz4"})
	if err != nil {
		t.Fatal(err)
	}
	if v.SizeBytes != 2<<20 || v.Native != "tank/k8s/pvc-new" {
		t.Fatalf("volume %+v", v)
	}
	if err := b.DeleteVolume(context.Background(), "pvc-new"); err != nil {
		t.Fatal(err)
	}
	if err := b.DeleteVolume(context.Background(), "pvc-src"); !errors.Is(err, backend.ErrInUse) {
		t.Fatalf("DeleteVolume of a volume with snapshots: %v, want ErrInUse", err)
	}
}

const listSnaps = "zfs list -Hp -t snapshot -r -o name,volsize,creation,defer_destroy tank/k8s"

// Snapshots of filesystems, hidden clone origins and snapshots deleted but
// kept for their clones (defer_destroy=on) are not listed.
func TestListSnapshotsParsing(t *testing.T) {
	t.Parallel()
	b := newScripted(t,
		call{Cmd: listSnaps, Stdout: "tank/k8s@fs-snap\t-\t1764050000\toff\n" +
			"tank/k8s/pvc-a@snap-2\t1048576\t1764050002\toff\n" +
			"tank/k8s/pvc-a@pillar-clone-pvc-b\t1048576\t1764050003\toff\n" +
			"tank/k8s/pvc-a@snap-0\t1048576\t1764050000\ton\n" +
			"tank/k8s/pvc-a@snap-1\t1048576\t1764050001\toff\n"},
	)
	snaps, err := b.ListSnapshots(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if len(snaps) != 2 || snaps[0].Name != "snap-1" || snaps[1].Name != "snap-2" || snaps[0].SourceVolume != "pvc-a" || snaps[0].CreatedAt.Unix() != 1764050001 {
		t.Fatalf("snapshots %+v", snaps)
	}
}

// DeleteSnapshot is one `zfs destroy -d` (the real zfs(8) exits 0 and
// marks a snapshot with clones defer_destroy=on); a marked snapshot is
// deleted already, so deleting it again runs nothing, and its name cannot
// be taken again on the same volume while ZFS keeps it.
func TestDeleteSnapshotDefers(t *testing.T) {
	t.Parallel()
	const marked = "tank/k8s/pvc-a@snap-1\t1048576\t1764050001\ton\n"
	b := newScripted(t,
		call{Cmd: listSnaps, Stdout: "tank/k8s/pvc-a@snap-1\t1048576\t1764050001\toff\n"},
		call{Cmd: "zfs destroy -d tank/k8s/pvc-a@snap-1"},
		// Again: deleted already, nothing to run.
		call{Cmd: listSnaps, Stdout: marked},
		// GetSnapshot and a restore from it: not found.
		call{Cmd: listSnaps, Stdout: marked},
		call{Cmd: listSnaps, Stdout: marked},
		// The same name on the same volume: ZFS still holds it.
		call{Cmd: listSnaps, Stdout: marked},
		call{Cmd: "zfs list -Hp -o name,type,volsize,volblocksize tank/k8s/pvc-a", Stdout: "tank/k8s/pvc-a\tvolume\t1048576\t8192\n"},
		call{Cmd: "zfs snapshot tank/k8s/pvc-a@snap-1", Stderr: "cannot create snapshot 'tank/k8s/pvc-a@snap-1': dataset already exists\n", Exit: 1},
		call{Cmd: listSnaps, Stdout: marked},
	)
	ctx := context.Background()
	if err := b.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Fatalf("DeleteSnapshot: %v", err)
	}
	if err := b.DeleteSnapshot(ctx, "snap-1"); err != nil {
		t.Fatalf("DeleteSnapshot again: %v", err)
	}
	if _, err := b.GetSnapshot(ctx, "snap-1"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("GetSnapshot of a deleted snapshot: %v, want ErrNotFound", err)
	}
	if _, err := b.CreateVolumeFrom(ctx, "pvc-late", 0, backend.Source{Snapshot: "snap-1"}, nil); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("restore from a deleted snapshot: %v, want ErrNotFound", err)
	}
	_, err := b.CreateSnapshot(ctx, "snap-1", "pvc-a")
	if !errors.Is(err, backend.ErrAlreadyExists) || !strings.Contains(err.Error(), "restored from it") {
		t.Fatalf("CreateSnapshot over a deleted, kept snapshot: %v, want ErrAlreadyExists saying why", err)
	}
}
