//go:build kernelguest

package guest

import (
	"context"
	"errors"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/zfs"
)

// A snapshot deleted while a volume restored from it lives, on the real
// zfs: DeleteSnapshot's `zfs destroy -d` marks it defer_destroy=on, and
// destroying the restored volume (its last clone) destroys it. The zfs
// outputs are logged and matched against what the simulator prints for
// the same commands (sim/storagetools, "deferred snapshot destroy").
func TestZFSDeferredSnapshotDestroy(t *testing.T) {
	ctx := context.Background()
	pool := zfsPool(t, "k8s")
	b := zfs.New(zfs.Config{Pool: pool, ParentDataset: "k8s"}, execRunner())
	if _, err := b.CreateVolume(ctx, "src", 32*mib, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateSnapshot(ctx, "snap", "src"); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CreateVolumeFrom(ctx, "restored", 48*mib, backend.Source{Snapshot: "snap"}, nil); err != nil {
		t.Fatal(err)
	}
	native := pool + "/k8s/src@snap"
	out, err := try("zfs", "destroy", native)
	t.Logf("zfs destroy %s: %v\n%s", native, err, out)
	if err == nil || out != "cannot destroy '"+native+"': snapshot has dependent clones\nuse '-R' to destroy the following datasets:\n"+pool+"/k8s/restored" {
		t.Fatalf("plain destroy of a cloned snapshot: %v %q", err, out)
	}

	if err := b.DeleteSnapshot(ctx, "snap"); err != nil {
		t.Fatalf("DeleteSnapshot with a restored volume: %v", err)
	}
	if err := b.DeleteSnapshot(ctx, "snap"); err != nil {
		t.Fatalf("DeleteSnapshot again: %v", err)
	}
	list := sh(t, "zfs", "list", "-H", "-t", "snapshot", "-o", "name,defer_destroy,clones", "-r", pool)
	t.Logf("zfs list -H -t snapshot -o name,defer_destroy,clones -r %s:\n%s", pool, list)
	if list != native+"\ton\t"+pool+"/k8s/restored" {
		t.Fatalf("after DeleteSnapshot, zfs lists %q, want the snapshot marked defer_destroy=on", list)
	}
	if _, err := b.GetSnapshot(ctx, "snap"); !errors.Is(err, backend.ErrNotFound) {
		t.Fatalf("GetSnapshot of a deleted snapshot: %v", err)
	}
	out, err = try("zfs", "destroy", pool+"/k8s/src")
	t.Logf("zfs destroy %s/k8s/src: %v\n%s", pool, err, out)
	if err := b.DeleteVolume(ctx, "src"); err == nil {
		t.Fatal("DeleteVolume of the source of a kept snapshot succeeded")
	}

	if err := b.DeleteVolume(ctx, "restored"); err != nil {
		t.Fatalf("DeleteVolume(restored): %v", err)
	}
	out, err = try("zfs", "list", "-H", "-o", "name", native)
	t.Logf("zfs list -H -o name %s: %v\n%s", native, err, out)
	if err == nil || out != "cannot open '"+native+"': dataset does not exist" {
		t.Fatalf("the deferred snapshot outlived its last clone: %v %q", err, out)
	}
	out, err = try("zfs", "destroy", "-d", native)
	t.Logf("zfs destroy -d %s: %v\n%s", native, err, out)
	if err := b.DeleteVolume(ctx, "src"); err != nil {
		t.Fatalf("DeleteVolume(src) once the snapshot went: %v", err)
	}
}
