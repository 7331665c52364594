package bench_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

func ms(n int) time.Duration { return time.Duration(n) * time.Millisecond }

func TestSlowdownAndStall(t *testing.T) {
	t.Parallel()
	var quiet, loaded []time.Duration
	for i := 1; i <= 100; i++ {
		quiet = append(quiet, ms(i))     // p50 50 ms, p99 99 ms
		loaded = append(loaded, ms(3*i)) // p50 150 ms, p99 297 ms
	}
	if got := bench.Slowdown(quiet, loaded, .5); got != 3 {
		t.Fatalf("p50 slowdown = %v, want 3 (loaded ÷ quiet)", got)
	}
	if got := bench.Slowdown(quiet, loaded, .99); got != 3 {
		t.Fatalf("p99 slowdown = %v, want 3", got)
	}
	if bench.Stalled(loaded, time.Second) {
		t.Fatal("no request over the limit, yet stalled")
	}
	if !bench.Stalled(append(loaded, 1500*time.Millisecond), time.Second) {
		t.Fatal("one request over the limit must count as a stall")
	}
	if got := (bench.AdminLoad{Elapsed: 2 * time.Second}).PerSecond(300); got != 150 {
		t.Fatalf("PerSecond = %v, want 150", got)
	}
}

// HammerAdmin sends each worker's writes to its replica, a create then a
// patch of what it created, and stops at the requested total.
func TestHammerAdminSpreadsAndCounts(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	hits := map[string]int{}
	patched := map[string]bool{}
	replica := func(name string) *httptest.Server {
		return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer tok" {
				w.WriteHeader(401)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			hits[name+" "+r.Method]++
			switch r.Method {
			case http.MethodPost:
				var body struct{ Name string }
				json.NewDecoder(r.Body).Decode(&body)
				json.NewEncoder(w).Encode(map[string]string{"id": "pr_" + body.Name})
			case http.MethodPatch:
				patched[strings.TrimPrefix(r.URL.Path, "/admin/v1/principals/")] = true
				w.Write([]byte(`{}`))
			}
		}))
	}
	a, b := replica("a"), replica("b")
	defer a.Close()
	defer b.Close()
	l, err := bench.HammerAdmin(context.Background(), []string{a.URL, b.URL}, "tok", "x", 4, 40)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Creates) != 20 || len(l.Patches) != 20 {
		t.Fatalf("%d creates, %d patches; want 20 each for 40 writes", len(l.Creates), len(l.Patches))
	}
	if hits["a POST"] == 0 || hits["b POST"] == 0 || hits["a POST"]+hits["b POST"] != 20 || len(patched) != 20 {
		t.Fatalf("hits %v, %d distinct principals patched", hits, len(patched))
	}
	if _, err := bench.HammerAdmin(context.Background(), []string{a.URL}, "wrong", "y", 2, 4); err == nil {
		t.Fatal("a refused write must fail the run")
	}
}
