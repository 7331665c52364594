package bench_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

func TestParseVmRSS(t *testing.T) {
	t.Parallel()
	status := "Name:\tproxy\nVmPeak:\t  900000 kB\nVmRSS:\t   162576 kB\nRssAnon:\t  150000 kB\n"
	if got, err := bench.ParseVmRSS(status); err != nil || got != 162576 {
		t.Fatalf("ParseVmRSS = %d, %v; want 162576 (the VmRSS line, not VmPeak or RssAnon)", got, err)
	}
	if _, err := bench.ParseVmRSS("Name:\tproxy\n"); err == nil {
		t.Fatal("no VmRSS line must be an error, not 0")
	}
}

func TestParseStatCPU(t *testing.T) {
	t.Parallel()
	// A command name with a space and a parenthesis: fields are counted
	// after the last ')'. utime 250 and stime 50 ticks are fields 14, 15.
	stat := "4242 (my (proxy) x) S 1 4242 4242 0 -1 4194560 1000 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	got, err := bench.ParseStatCPU(stat)
	if err != nil || got != 3*time.Second {
		t.Fatalf("ParseStatCPU = %v, %v; want 3s (300 ticks of 10 ms)", got, err)
	}
	// This process's own stat parses and grows with work.
	b, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		t.Skip("no /proc")
	}
	if _, err := bench.ParseStatCPU(string(b)); err != nil {
		t.Fatal(err)
	}
	ps, err := bench.ReadProc(os.Getpid())
	if err != nil || ps.RSSKB <= 0 || ps.FDs <= 0 {
		t.Fatalf("ReadProc(self) = %+v, %v", ps, err)
	}
}

func TestParseMetric(t *testing.T) {
	t.Parallel()
	text := "# HELP go_goroutines Number of goroutines.\n# TYPE go_goroutines gauge\ngo_goroutines_extra 7\ngo_goroutines 8047\ngo_memstats_stack_inuse_bytes 5.2887552e+07\n"
	if g, err := bench.ParseMetric(text, "go_goroutines"); err != nil || g != 8047 {
		t.Fatalf("go_goroutines = %v, %v; want 8047 (not the _extra series)", g, err)
	}
	if s, err := bench.ParseMetric(text, "go_memstats_stack_inuse_bytes"); err != nil || s != 52887552 {
		t.Fatalf("stack = %v, %v", s, err)
	}
	if _, err := bench.ParseMetric(text, "go_threads"); err == nil {
		t.Fatal("a missing metric must be an error")
	}
}

func TestPerStreamKB(t *testing.T) {
	t.Parallel()
	if got := bench.PerStreamKB(33000, 161000, 2000); got != 64 {
		t.Fatalf("PerStreamKB = %v, want 64 ((161000-33000)/2000)", got)
	}
	if got := bench.PerStreamKB(1, 2, 0); got != 0 {
		t.Fatalf("no streams: %v", got)
	}
}

func TestLeaks(t *testing.T) {
	t.Parallel()
	before := bench.ProcSample{Goroutines: 45, FDs: 19}
	if l := bench.Leaks(before, bench.ProcSample{Goroutines: 50, FDs: 21}, 10, 4); len(l) != 0 {
		t.Fatalf("within tolerance reported as leaks: %v", l)
	}
	if l := bench.Leaks(before, bench.ProcSample{Goroutines: 30, FDs: 10}, 0, 0); len(l) != 0 {
		t.Fatalf("fewer than before is no leak: %v", l)
	}
	l := bench.Leaks(before, bench.ProcSample{Goroutines: 2045, FDs: 1019}, 10, 4)
	if len(l) != 2 || !strings.Contains(l[0], "+2000") || !strings.Contains(l[1], "+1000") {
		t.Fatalf("leaks = %v; want one goroutine and one descriptor line with their growth", l)
	}
}

func TestMarginalCost(t *testing.T) {
	t.Parallel()
	// 7-event streams cost 300 µs, 106-event ones 399 µs: 1 µs an event.
	got, err := bench.MarginalCost(300*time.Microsecond, 399*time.Microsecond, 7, 106)
	if err != nil || got != time.Microsecond {
		t.Fatalf("MarginalCost = %v, %v; want 1µs", got, err)
	}
	if _, err := bench.MarginalCost(1, 2, 7, 7); err == nil {
		t.Fatal("equal event counts must be an error")
	}
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", 3000) // longer than the reader's buffer
	stream := "event: message_start\ndata: {}\n\n" +
		"event: content_block_delta\ndata: " + long + "\n\n" +
		"event: ping\ndata: {\"note\":\"event: message_stop\"}\n\n" +
		"event: message_stop\ndata: {}\n\n"
	firsts := 0
	r, err := bench.ReadSSE(strings.NewReader(stream), nil, func() { firsts++ })
	if err != nil || r.Events != 4 || !r.Stopped || r.Errored || firsts != 1 {
		t.Fatalf("ReadSSE = %+v, %v, first called %d times; want 4 events, stopped, first once", r, err, firsts)
	}
	cut := "event: message_start\ndata: {}\n\nevent: content_block_delta\ndata: {}\n\n"
	if r, _ := bench.ReadSSE(strings.NewReader(cut), nil, nil); r.Stopped || r.Events != 2 {
		t.Fatalf("cut stream = %+v; want 2 events, not stopped", r)
	}
	errored := "event: message_start\ndata: {}\n\nevent: error\ndata: {}\n\n"
	if r, _ := bench.ReadSSE(strings.NewReader(errored), nil, nil); !r.Errored {
		t.Fatalf("error event not seen: %+v", r)
	}
}
