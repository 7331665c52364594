package storetest

import (
	"encoding/json"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseMetadata(t *testing.T, open Opener) {
	t.Run("Metadata", func(t *testing.T) { run(t, open, testMetadata) })
}

func testMetadata(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	if err := b.st.SetUpstreamModels(b.ctx, "up_1", []store.UpstreamModel{{ModelID: "b", DisplayName: "B", RefreshedAt: now}, {ModelID: "a", DisplayName: "A", RefreshedAt: now}}); err != nil {
		t.Fatal(err)
	}
	if err := b.st.SetUpstreamModels(b.ctx, "up_1", []store.UpstreamModel{{ModelID: "c", DisplayName: "C", RefreshedAt: now}, {ModelID: "a", DisplayName: "A", RefreshedAt: now}}); err != nil {
		t.Fatal(err)
	}
	ms := must(b.st.ListUpstreamModels(b.ctx, "up_1"))
	if len(ms) != 2 || ms[0].ModelID != "a" || ms[1].ModelID != "c" || !ms[0].RefreshedAt.Equal(now) {
		t.Fatalf("models %+v", ms)
	}
	_, err := b.st.GetPriceCatalog(b.ctx)
	wantErr(t, err, store.ErrNotFound)
	c := store.PriceCatalog{Version: "v1", ETag: `"v1"`, Body: json.RawMessage(`{"models":{}}`), FetchedAt: now}
	if changed := must(b.st.PutPriceCatalog(b.ctx, c)); !changed {
		t.Fatal("first catalog not a change")
	}
	if changed := must(b.st.PutPriceCatalog(b.ctx, c)); changed {
		t.Fatal("same version reported as a change")
	}
	c.Version = "v2"
	if changed := must(b.st.PutPriceCatalog(b.ctx, c)); !changed {
		t.Fatal("new version not a change")
	}
	got := must(b.st.GetPriceCatalog(b.ctx))
	if got.Version != "v2" || got.ETag != `"v1"` {
		t.Fatalf("catalog %+v", got)
	}
	// Concurrent writers of one new version: exactly one sees a change;
	// concurrent model refreshes both succeed.
	c.Version = "v3"
	var changes atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ch, err := b.st.PutPriceCatalog(b.ctx, c)
			if err != nil {
				t.Error(err)
			}
			if ch {
				changes.Add(1)
			}
			if err := b.st.SetUpstreamModels(b.ctx, "up_2", []store.UpstreamModel{{ModelID: "x", DisplayName: "X", RefreshedAt: now}}); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if changes.Load() != 1 {
		t.Fatalf("%d writers saw the change", changes.Load())
	}
	if ms := must(b.st.ListUpstreamModels(b.ctx, "up_2")); len(ms) != 1 {
		t.Fatalf("models %+v", ms)
	}
}
