package sqlite_test

import (
	"context"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/gateway/store"
	"github.com/pillarhq/pillar/impl/gateway/store/sqlite"
)

// BenchmarkInsertRequestEvents is the request-event writer's flush on the
// default database: one batch of n events (issue 24: its CPU burst lands
// on the cores serving requests).
func BenchmarkInsertRequestEvents(b *testing.B) {
	for _, n := range []int{1, 16, 32, 128} {
		b.Run(itoa(n), func(b *testing.B) {
			ctx := context.Background()
			st, err := sqlite.Open(ctx, filepath.Join(b.TempDir(), "proxy.db"), sqlite.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer st.Close()
			cost := int64(1234)
			evs := make([]store.RequestEvent, n)
			b.ReportAllocs()
			cpu0 := cpuTime()
			b.ResetTimer()
			for range b.N {
				for i := range evs {
					evs[i] = store.RequestEvent{At: time.Now(), PrincipalID: "pr_0123456789abcdef", KeyID: "ky_0123456789abcdef",
						UpstreamID: "up_0123456789abcdef", Model: "claude-sonnet-4-5", Status: 200, InputTokens: 12, OutputTokens: 34,
						DurationMillis: 1, CostNanos: &cost, PriceVersion: "2025-10-01", FirstByteMillis: 1}
				}
				if err := st.InsertRequestEvents(ctx, evs); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time, not wall time: on a shared machine the wall
			// time of a write is mostly waiting for a core.
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N), "cpu-ns/op")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(b.N*n), "cpu-ns/event")
		})
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
