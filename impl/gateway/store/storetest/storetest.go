// Package storetest is the one behavioural suite every store driver passes.
// Driver packages call Exercise with a function that opens a fresh, empty,
// migrated store per call.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

// Opener opens a fresh store driven by clk.
type Opener func(t *testing.T, clk *fakeclock.Clock) store.Store

type bundle struct {
	st  store.Store
	clk *fakeclock.Clock
	ctx context.Context
}

func setup(t *testing.T, open Opener) *bundle {
	t.Helper()
	clk := fakeclock.New(time.Time{})
	st := open(t, clk)
	t.Cleanup(func() { st.Close() })
	return &bundle{st: st, clk: clk, ctx: context.Background()}
}

// must returns v, or aborts the running check with err. It panics with a
// failure that run turns into t.Fatal, so calls nest inside expressions.
func must[T any](v T, err error) T {
	if err != nil {
		_, file, line, _ := runtime.Caller(1)
		panic(failure(fmt.Sprintf("%s:%d: unexpected error: %v", filepath.Base(file), line, err)))
	}
	return v
}

type failure string

// run executes one check, turning a must failure into t.Fatal.
func run(t *testing.T, open Opener, check func(*testing.T, Opener)) {
	t.Parallel()
	defer func() {
		if r := recover(); r != nil {
			if f, ok := r.(failure); ok {
				t.Fatal(string(f))
			}
			panic(r)
		}
	}()
	check(t, open)
}

func wantErr(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want %v", err, target)
	}
}

func apiKeySpec(name string) store.UpstreamSpec {
	return store.UpstreamSpec{Name: name, Kind: store.KindVendorAPIKey, BaseURL: "https://api.example", Enabled: true,
		Credential: []byte("ct-" + name), CredentialKind: "api_key"}
}

func principal(name string) store.Principal {
	return store.Principal{Name: name, Kind: "machine", Enabled: true, AllowedModels: []string{"claude-*"}}
}

// Exercise runs the suite.
func Exercise(t *testing.T, open Opener) {
	exerciseUpstreams(t, open)
	exercisePrincipals(t, open)
	exerciseKeys(t, open)
	exerciseConfig(t, open)
	exerciseDelta(t, open) // incremental configuration reads against full loads
	exerciseCloud(t, open)
	exerciseEvents(t, open) // the request log, live traffic, rollups, audit and affinity
	exerciseSpend(t, open)  // costs on events and rollups, usage totals by principal, key, upstream and model
	exerciseMetadata(t, open)
	exerciseOAuth(t, open)
	exerciseKeepAlive(t, open)
	exercisePlugins(t, open)
	exerciseLimits(t, open)
	exerciseSealed(t, open)
	exerciseOrigins(t, open)
	exerciseWebhooks(t, open) // alert webhooks and alert episodes
	exerciseCaptures(t, open) // captured exchanges
	exerciseIdentity(t, open) // scoped admin tokens and the readable audit trail
}

// race runs fn from n goroutines at once and counts successes and stale
// revisions; any other error fails the test.
func race(t *testing.T, n int, fn func(i int) error) (ok, stale int64) {
	t.Helper()
	var okN, staleN atomic.Int64
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			<-start
			switch err := fn(i); {
			case err == nil:
				okN.Add(1)
			case errors.Is(err, store.ErrStaleRevision), errors.Is(err, store.ErrConflict):
				staleN.Add(1)
			default:
				t.Errorf("writer %d: %v", i, err)
			}
		}(i)
	}
	close(start)
	wg.Wait()
	return okN.Load(), staleN.Load()
}
