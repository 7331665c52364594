package sqlite_test

import (
	"context"
	"runtime"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/testing/cputime"
)

// BenchmarkInsertRequestEvents is the request-event writer's flush on the
// default database: one batch of n events (its CPU burst lands on the
// cores serving requests).
func BenchmarkInsertRequestEvents(b *testing.B) {
	for _, n := range []int{1, 16, 32, 128} {
		b.Run(itoa(n), func(b *testing.B) {
			ctx := context.Background()
			st := openTemp(b)
			cost := int64(1234)
			evs := make([]store.RequestEvent, n)
			b.ReportAllocs()
			cpu0 := cputime.Process()
			b.ResetTimer()
			for range b.N {
				fillEvents(evs, &cost)
				if err := st.InsertRequestEvents(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time, not wall time: on a shared machine the wall
			// time of a write is mostly waiting for a core.
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64((cputime.Process()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/event")
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// fillEvents makes evs a batch of typical request events, timed now.
func fillEvents(evs []store.RequestEvent, cost *int64) {
	for i := range evs {
		evs[i] = store.RequestEvent{At: time.Now(), PrincipalID: "pr_0123456789abcdef", KeyID: "ky_0123456789abcdef",
			UpstreamID: "up_0123456789abcdef", Model: "claude-sonnet-4-5", Status: 200, InputTokens: 12, OutputTokens: 34,
			DurationMillis: 1, CostNanos: cost, PriceVersion: "2025-10-01", FirstByteMillis: 1}
	}
}

// BenchmarkFlushTail is the distribution of one flush's CPU (32 events,
// the writer's batch at the bench's rate) as the table grows: a WAL
// checkpoint makes the flush that crosses wal_autocheckpoint pages cost
// several times the others; 0 never checkpoints, for the
// comparison. Thread CPU time, the goroutine locked to its thread: the
// pure-Go engine runs on the caller's goroutine.
func BenchmarkFlushTail(b *testing.B) {
	for _, pages := range []int{1000, 100, 0} {
		b.Run("autocheckpoint="+itoa(pages), func(b *testing.B) {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			ctx := context.Background()
			st := openTemp(b)
			db := st.DB()
			db.SetMaxOpenConns(1) // the pragma is per connection
			if _, err := db.ExecContext(ctx, "PRAGMA wal_autocheckpoint = "+itoa(pages)); err != nil {
				b.Fatal(err)
			}
			cost := int64(1234)
			evs := make([]store.RequestEvent, 32)
			per := make([]time.Duration, 0, b.N)
			b.ResetTimer()
			for range b.N {
				fillEvents(evs, &cost)
				t0 := threadCPU()
				if err := st.InsertRequestEvents(ctx, evs); err != nil {
					b.Fatal(err)
				}
				per = append(per, threadCPU()-t0)
			}
			b.StopTimer()
			slices.Sort(per)
			var sum time.Duration
			for _, d := range per {
				sum += d
			}
			q := func(f float64) float64 { return float64(per[int(f*float64(len(per)-1))].Nanoseconds()) }
			b.ReportMetric(float64(sum.Nanoseconds())/float64(len(per)), "cpu-ns/flush")
			b.ReportMetric(q(0.5), "p50-cpu-ns")
			b.ReportMetric(q(0.99), "p99-cpu-ns")
			b.ReportMetric(q(0.999), "p99.9-cpu-ns")
			b.ReportMetric(q(1), "max-cpu-ns")
		})
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
