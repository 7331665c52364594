package store

import (
	"sort"
	"testing"
	"time"
)

func TestNewIDSortsByCreation(t *testing.T) {
	t.Parallel()
	var ids []string
	seen := map[string]bool{}
	for i := 0; i < 5; i++ {
		ids = append(ids, NewID("up"))
		time.Sleep(2 * time.Millisecond)
	}
	if !sort.StringsAreSorted(ids) {
		t.Fatalf("ids not in creation order: %v", ids)
	}
	for i := 0; i < 10000; i++ {
		id := NewID("k")
		if seen[id] {
			t.Fatal("collision")
		}
		seen[id] = true
	}
}
