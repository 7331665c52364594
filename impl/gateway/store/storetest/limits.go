package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
)

func exerciseLimits(t *testing.T, open Opener) {
	t.Run("LimitWindows", func(t *testing.T) { run(t, open, testLimitWindows) })
	t.Run("LimitWindowsConcurrent", func(t *testing.T) { run(t, open, testLimitWindowsConcurrent) })
}

func testLimitWindows(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	t0 := now.Unix() - now.Unix()%60
	gen := must(b.st.ConfigGeneration(b.ctx))
	got := must(b.st.SyncLimitWindows(b.ctx, []store.LimitWindow{
		{PrincipalID: "pr_a", Kind: "requests", WindowSecs: 60, Start: t0, Count: 3},
		{PrincipalID: "pr_a", Kind: "tokens", WindowSecs: 60, Start: t0, Count: 500},
		{PrincipalID: "pr_b", Kind: "requests", WindowSecs: 60, Start: t0 - 60, Count: 1},
	}, now))
	if fmt.Sprint(got) != fmt.Sprintf("[{pr_a requests 60 %d 3} {pr_a tokens 60 %d 500} {pr_b requests 60 %d 1}]", t0, t0, t0-60) {
		t.Fatalf("windows %v", got)
	}
	// Deltas add up; nothing to add still reads the totals.
	must(b.st.SyncLimitWindows(b.ctx, []store.LimitWindow{{PrincipalID: "pr_a", Kind: "requests", WindowSecs: 60, Start: t0, Count: 2}}, now))
	got = must(b.st.SyncLimitWindows(b.ctx, nil, now))
	if len(got) != 3 || got[0].Count != 5 {
		t.Fatalf("after a second delta %v", got)
	}
	if must(b.st.ConfigGeneration(b.ctx)) != gen {
		t.Fatal("limit counting bumped the config generation")
	}
	// pr_b's window (previous one) expires at its start + 2 windows = t0+60.
	got = must(b.st.SyncLimitWindows(b.ctx, nil, now.Add(time.Duration(t0+60-now.Unix())*time.Second-time.Nanosecond)))
	if len(got) != 3 {
		t.Fatalf("a window expired early: %v", got)
	}
	got = must(b.st.SyncLimitWindows(b.ctx, nil, now.Add(time.Duration(t0+60-now.Unix())*time.Second)))
	if len(got) != 2 || got[0].PrincipalID != "pr_a" || got[1].PrincipalID != "pr_a" {
		t.Fatalf("expired window kept: %v", got)
	}
}

// Replicas syncing the same windows at once lose no count.
func testLimitWindowsConcurrent(t *testing.T, open Opener) {
	b := setup(t, open)
	now := b.clk.Now()
	t0 := now.Unix() - now.Unix()%3600
	const replicas, rounds = 4, 10
	var wg sync.WaitGroup
	errs := make(chan error, replicas*rounds)
	for r := 0; r < replicas; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < rounds; i++ {
				_, err := b.st.SyncLimitWindows(b.ctx, []store.LimitWindow{
					{PrincipalID: "pr_b", Kind: "tokens", WindowSecs: 3600, Start: t0, Count: 7},
					{PrincipalID: "pr_a", Kind: "requests", WindowSecs: 3600, Start: t0, Count: 1},
				}, now)
				if err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	got := must(b.st.SyncLimitWindows(b.ctx, nil, now))
	if len(got) != 2 || got[0].Count != replicas*rounds || got[1].Count != 7*replicas*rounds {
		t.Fatalf("totals %v, want %d requests and %d tokens", got, replicas*rounds, 7*replicas*rounds)
	}
}
