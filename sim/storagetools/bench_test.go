package storagetools

import (
	"fmt"
	"io"
	"testing"
)

// BenchmarkRun is one simulated tool call in process: the directory lock,
// loading the state, the command, and saving the state when it changed.
// A call through the binary adds the process start to this (see
// docs/benchmarks.md, pillar-csi agent).
func BenchmarkRun(b *testing.B) {
	h, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if err := h.CreateVolumeGroup("vg0", 20<<30, 0); err != nil {
		b.Fatal(err)
	}
	if err := h.CreateThinPool("vg0", "thin", 10<<30); err != nil {
		b.Fatal(err)
	}
	// A group holding some volumes already, as on a node in use.
	for i := range 20 {
		if code := h.Run("lvcreate", []string{"-y", "-n", fmt.Sprintf("pvc-%d", i), "-V", "32m", "--thinpool", "thin", "vg0"}, io.Discard, io.Discard); code != 0 {
			b.Fatalf("lvcreate exit %d", code)
		}
	}
	run := func(b *testing.B, name string, args ...string) {
		b.Helper()
		if code := h.Run(name, args, io.Discard, io.Discard); code != 0 {
			b.Fatalf("%s exit %d", name, code)
		}
	}
	b.Run("vgs", func(b *testing.B) {
		for b.Loop() {
			run(b, "vgs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "vg_name,vg_size,vg_free,vg_extent_size", "vg0")
		}
	})
	b.Run("lvs", func(b *testing.B) {
		for b.Loop() {
			run(b, "lvs", "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "lv_name,lv_size,lv_attr,pool_lv,lv_tags", "vg0/pvc-1")
		}
	})
	b.Run("lvcreate+lvremove", func(b *testing.B) {
		for b.Loop() {
			run(b, "lvcreate", "-y", "-n", "bench", "-V", "32m", "--thinpool", "thin", "vg0")
			run(b, "lvremove", "-y", "vg0/bench")
		}
	})
}
