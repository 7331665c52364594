package bench_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

// The profiler asks for one-second windows with the admin token, one after
// another, and keeps each answer until it is stopped.
func TestProfilerCollectsWindowsUntilStopped(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	answered := make(chan struct{}, 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		if r.URL.Path != "/debug/pprof/profile" || r.URL.Query().Get("seconds") != "1" {
			http.NotFound(w, r)
			return
		}
		calls.Add(1)
		w.Write([]byte("profile-bytes"))
		answered <- struct{}{}
	}))
	defer srv.Close()
	dir := t.TempDir()
	p := &bench.Profiler{AdminURL: srv.URL, Token: "tok", Window: time.Second, Dir: dir, Prefix: "x"}
	p.Start(context.Background())
	// The fake answers at once. Windows are sequential, so once the fourth
	// is asked for, three are kept; the fourth may be cut by Stop.
	for range 4 {
		<-answered
	}
	files, err := p.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 3 {
		t.Fatalf("%d profiles kept after %d windows", len(files), calls.Load())
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err != nil || string(b) != "profile-bytes" || !strings.HasPrefix(filepath.Base(f), "x-") {
			t.Fatalf("%s: %q %v", f, b, err)
		}
	}

	// A proxy without the endpoint (or a wrong token) ends the run with an
	// error that says what to turn on.
	p = &bench.Profiler{AdminURL: srv.URL, Token: "wrong", Window: time.Second, Dir: dir, Prefix: "y"}
	p.Start(context.Background())
	<-p.Done()
	_, err = p.Stop()
	if err == nil || !strings.Contains(err.Error(), "401") || !strings.Contains(err.Error(), "PROXY_DEBUG_PPROF") {
		t.Fatalf("refused profile: %v", err)
	}
}

// PprofTop reads a real CPU profile with go tool pprof; CPUClock sees the
// CPU this process burned meanwhile.
func TestPprofTopAndCPUClock(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go tool pprof")
	}
	path := filepath.Join(t.TempDir(), "cpu.pb.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	before := bench.ReadCPUClock(nil)
	if err := pprof.StartCPUProfile(f); err != nil {
		t.Skipf("a CPU profile is already running: %v", err)
	}
	sum := sha256.Sum256(nil)
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		sum = sha256.Sum256(sum[:])
	}
	pprof.StopCPUProfile()
	f.Close()
	used := bench.ReadCPUClock(nil).Since(before)
	if used.Procs["self"] <= 0 || used.Machine.Total <= 0 || used.Machine.Busy <= 0 {
		t.Fatalf("CPU used: %+v", used)
	}
	top, err := bench.PprofTop(context.Background(), []string{path}, 10, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(top, "Type: cpu") || !strings.Contains(top, "sha256") {
		t.Fatalf("top:\n%s", top)
	}
}
