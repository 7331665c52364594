package pricing

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

type fakeGetter struct{ c *store.PriceCatalog }

func (f *fakeGetter) GetPriceCatalog(context.Context) (*store.PriceCatalog, error) {
	if f.c == nil {
		return nil, store.ErrNotFound
	}
	return f.c, nil
}

// P-TOPO-3: installation is local and follows the stored version.
func TestInstallerFollowsStoredVersion(t *testing.T) {
	t.Parallel()
	g := &fakeGetter{}
	i := NewInstaller(g, nil, nil)
	if ok, err := i.Sync(context.Background()); ok || err != nil || i.Current() != nil {
		t.Fatalf("nothing stored: %v %v", ok, err)
	}
	g.c = &store.PriceCatalog{Version: "v1", Body: json.RawMessage(`{"version":"v1","models":{"m":{"input":3,"output":15}}}`)}
	if ok, err := i.Sync(context.Background()); !ok || err != nil {
		t.Fatalf("install: %v %v", ok, err)
	}
	if c := i.Current(); c.Version != "v1" || c.Models["m"].Output != 15 {
		t.Fatalf("installed %+v", c)
	}
	if ok, _ := i.Sync(context.Background()); ok {
		t.Fatal("same version installed twice")
	}
	g.c = &store.PriceCatalog{Version: "v2", Body: json.RawMessage(`{"models":{}}`)}
	if ok, _ := i.Sync(context.Background()); !ok || i.Current().Version != "v2" {
		t.Fatal("new version not installed")
	}
}
