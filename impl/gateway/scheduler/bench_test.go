package scheduler

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// BenchmarkJobThroughput: jobs per second from enqueue to done, per driver.
func BenchmarkJobThroughput(b *testing.B) {
	for _, d := range []driver{sqliteDriver, postgresDriver} {
		b.Run(d.name, func(b *testing.B) {
			var done atomic.Int64
			typ := Type{Name: "bench:noop", Class: Maintenance, Handler: func(context.Context, Job) (Outcome, error) {
				done.Add(1)
				return OutcomeDone, nil
			}}
			shared := d.shared(b)
			s, err := d.open(b, shared, []Type{typ}, Options{Metrics: NewMetrics(prometheus.NewRegistry()), Workers: 64, PollInterval: 10 * time.Millisecond})
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			for i := 0; i < b.N; i++ {
				if _, _, err := s.Enqueue(ctx, Enqueue{Type: "bench:noop", IdempotencyKey: fmt.Sprintf("k%d-%d", i, time.Now().UnixNano())}); err != nil {
					b.Fatal(err)
				}
			}
			b.ResetTimer()
			start := time.Now()
			if err := s.Start(ctx); err != nil {
				b.Fatal(err)
			}
			for done.Load() < int64(b.N) {
				time.Sleep(5 * time.Millisecond)
			}
			elapsed := time.Since(start)
			b.StopTimer()
			s.Stop(ctx)
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "jobs/s")
		})
	}
}
