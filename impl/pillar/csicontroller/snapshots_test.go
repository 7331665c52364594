package csicontroller

import (
	"strings"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// Kubernetes names snapshots "snapshot-<uid>", which LVM reserves: such
// names, like others no backend holds, become a stable hash every backend
// accepts.
func TestSnapshotName(t *testing.T) {
	t.Parallel()
	if got := SnapshotName("snap-1"); got != "snap-1" {
		t.Fatalf("SnapshotName(snap-1) = %q", got)
	}
	for _, in := range []string{"snapshot-4e1c1a4e-7b8e-4b0a-9f3e-2f1d3c5b6a70", "pillar-clone-x", "Has Space", strings.Repeat("x", 101)} {
		got := SnapshotName(in)
		if !strings.HasPrefix(got, "sn-") || len(got) != 35 || got != SnapshotName(in) {
			t.Errorf("SnapshotName(%q) = %q", in, got)
		}
		if err := backend.ValidateSnapshotName(got); err != nil {
			t.Errorf("SnapshotName(%q) = %q: %v", in, got, err)
		}
	}
	if SnapshotName("snapshot-a") == SnapshotName("snapshot-b") {
		t.Fatal("distinct names collide")
	}
}
