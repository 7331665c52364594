package storetest

import (
	"context"
	"strconv"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/cputime"
)

// BenchAdminWrites measures what one admin client's pair of writes costs the
// store: a principal created, then its allowed models patched,
// then the delta of both read back as a replica's rebuild reads it. It
// reports CPU per pair (cpu-ns/op) beside wall time: on a shared machine a
// write's wall time is mostly waiting for a core.
func BenchAdminWrites(b *testing.B, st store.Store) {
	// A request's context, as the admin API passes: cancellable.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gen, err := st.ConfigGeneration(ctx)
	if err != nil {
		b.Fatal(err)
	}
	models := []string{"claude-sonnet-*"}
	b.ReportAllocs()
	cpu0 := cputime.Process()
	b.ResetTimer()
	for i := range b.N {
		p, err := st.CreatePrincipal(ctx, store.Principal{Name: "bench-" + strconv.Itoa(i), Kind: "machine", Enabled: true,
			AllowedModels: []string{"claude-*"}})
		if err != nil {
			b.Fatal(err)
		}
		if _, err := st.PatchPrincipal(ctx, p.ID, p.Revision, store.PrincipalPatch{AllowedModels: &models}); err != nil {
			b.Fatal(err)
		}
		d, err := st.LoadConfigDelta(ctx, gen)
		if err != nil {
			b.Fatal(err)
		}
		if len(d.Principals) != 1 || d.Principals[0].ID != p.ID {
			b.Fatalf("delta after generation %d: %d principals, want %s", gen, len(d.Principals), p.ID)
		}
		gen = d.Generation
	}
	b.StopTimer()
	b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
}
