package snapshot_test

import (
	"crypto/sha256"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/snapshot"
	"github.com/pillarhq/pillar/impl/gateway/store"
)

// A build maps enough keys to do it on two goroutines: every live key of a
// known principal is found under its hash and points at its principal;
// revoked keys, keys of unknown principals and malformed hashes are not
// mapped; each principal's key list matches the keys pointing at it
// (Describe reports BROKEN otherwise).
func TestBuildMapsManyKeys(t *testing.T) {
	now := time.Unix(1_800_000_000, 0).UTC()
	cfg := &store.Config{Generation: 1}
	for i := range 50 {
		cfg.Principals = append(cfg.Principals, store.Principal{ID: fmt.Sprint("pr_", i), Name: fmt.Sprint("p", i), Kind: "human",
			Enabled: true, AllowedModels: []string{}, DefaultLimits: []byte("[]"), CreatedAt: now, UpdatedAt: now})
	}
	const n = 9000
	revoked := now
	for i := range n {
		h := sha256.Sum256([]byte(fmt.Sprint("key ", i)))
		k := store.Key{ID: fmt.Sprint("key_", i), PrincipalID: fmt.Sprint("pr_", i%50), Hash: h[:]}
		switch i % 100 {
		case 1:
			k.RevokedAt = &revoked
		case 2:
			k.PrincipalID = "pr_gone"
		case 3:
			k.Hash = h[:16]
		}
		cfg.Keys = append(cfg.Keys, k)
	}
	snap := snapshot.Build(cfg, nil, now)
	if _, _, keys := snap.Counts(); keys != n-3*n/100 {
		t.Fatalf("%d keys mapped, want %d", keys, n-3*n/100)
	}
	for i := range n {
		k := snap.KeyByHash(sha256.Sum256([]byte(fmt.Sprint("key ", i))))
		if want := i%100 < 1 || i%100 > 3; (k != nil) != want {
			t.Fatalf("key %d found %v, want %v", i, k != nil, want)
		}
		if k != nil && (k.ID != fmt.Sprint("key_", i) || k.Principal != snap.Principal(fmt.Sprint("pr_", i%50))) {
			t.Fatalf("key %d maps to %+v", i, k)
		}
	}
	if d := snapshot.Describe(snap); strings.Contains(d, "BROKEN") {
		t.Fatalf("describe:\n%s", d)
	}
}
