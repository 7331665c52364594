package relay

import (
	"bytes"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/testing/promtest"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
)

// perRequestFamilies are the series requestSeries keeps in shards.
var perRequestFamilies = map[string]bool{
	"svc_proxy_requests_total":             true,
	"svc_proxy_request_duration_seconds":   true,
	"svc_proxy_time_to_first_byte_seconds": true,
}

// exposition is the text format of reg's per-request families.
func exposition(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if perRequestFamilies[mf.GetName()] {
			if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
				t.Fatal(err)
			}
		}
	}
	return b.String()
}

// The sharded per-request series expose what Prometheus' own counter
// vector and histograms did for the same observations: the same names,
// help, codes present at zero, bucket bounds (inclusive), counts and sums;
// codes outside the tracked ones and durations of zero (not observed)
// included.
func TestRequestSeriesExposeWhatPrometheusTypesDid(t *testing.T) {
	t.Parallel()
	// The series as they were registered before they were sharded.
	ref := prometheus.NewRegistry()
	requests := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "svc_proxy_requests_total",
		Help: "Requests on the proxy path by HTTP status code.",
	}, []string{"code"})
	duration := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svc_proxy_request_duration_seconds",
		Help:    "Time from request arrival to the last byte relayed.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2.5, 14),
	})
	ttfb := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "svc_proxy_time_to_first_byte_seconds",
		Help:    "Time from request arrival to the first byte of the upstream's answer relayed to the client (Messages requests that reached an upstream).",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
	})
	ref.MustRegister(requests, duration, ttfb)
	for _, c := range trackedCodes {
		requests.WithLabelValues(strconv.Itoa(c))
	}

	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	if got, want := exposition(t, reg), exposition(t, ref); got != want {
		t.Fatalf("before any request:\n%s\nwant:\n%s", got, want)
	}
	// Durations of whole binary fractions of a second: their sums are
	// exact in any order, so the shards' sums added up equal one sum.
	const tick = time.Second / 512
	bounds := prometheus.ExponentialBuckets(0.001, 2.5, 14)
	if bounds[3] != float64(8*tick)/float64(time.Second) {
		t.Fatalf("bound %v is not 8 ticks", bounds[3])
	}
	for i, c := range []struct {
		code      int
		took, ttf time.Duration
	}{
		{200, 2 * tick, tick},
		{200, 8 * tick, 4 * tick}, // on a bound: in that bucket
		{529, 40 * time.Second, 0},
		{418, 0, 0}, // not tracked; no duration
		{0, tick, 0},
		{401, 0, 0},
		{200, 2 * time.Hour, time.Hour}, // past the last bound
	} {
		m.observe(c.code, c.took)
		code := c.code
		requests.WithLabelValues(strconv.Itoa(code)).Inc()
		if c.took > 0 {
			duration.Observe(c.took.Seconds())
		}
		if c.ttf > 0 {
			m.firstByte(c.ttf)
			ttfb.Observe(c.ttf.Seconds())
		}
		if got, want := exposition(t, reg), exposition(t, ref); got != want {
			t.Fatalf("after observation %d:\n%s\nwant:\n%s", i, got, want)
		}
	}
}

// Observations from many goroutines at once, spread over the shards, all
// count; a scrape meanwhile sees counts that agree with the buckets.
func TestRequestSeriesConcurrentObservationsAllCount(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	const workers, each = 8, 500
	var wg sync.WaitGroup
	stop := make(chan struct{})
	scraped := make(chan error, 1)
	go func() {
		defer close(scraped)
		for {
			select {
			case <-stop:
				return
			default:
			}
			mfs, err := reg.Gather()
			if err != nil {
				scraped <- err
				return
			}
			for _, mf := range mfs {
				if h := mf.GetMetric()[0].GetHistogram(); h != nil && perRequestFamilies[mf.GetName()] {
					bs := h.GetBucket()
					if last := bs[len(bs)-1].GetCumulativeCount(); last > h.GetSampleCount() {
						scraped <- fmt.Errorf("%s: bucket count %d above the sample count %d", mf.GetName(), last, h.GetSampleCount())
						return
					}
				}
			}
		}
	}()
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				m.observe(200, 10*time.Millisecond)
				m.firstByte(time.Millisecond)
				m.observe(503, 0)
			}
		}()
	}
	wg.Wait()
	close(stop)
	if err := <-scraped; err != nil {
		t.Fatal(err)
	}
	n := float64(workers * each)
	for _, q := range [][]string{{"svc_proxy_requests_total", "code", "200"}, {"svc_proxy_requests_total", "code", "503"},
		{"svc_proxy_request_duration_seconds"}, {"svc_proxy_time_to_first_byte_seconds"}} {
		if got := promtest.Value(t, reg, q[0], q[1:]...); got != n {
			t.Errorf("%v = %v, want %v", q, got, n)
		}
	}
}

// A request's updates allocate nothing (tracked codes).
func TestRequestSeriesDoNotAllocate(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector drops sync.Pool items")
	}
	m := NewMetrics(prometheus.NewRegistry())
	if n := testing.AllocsPerRun(100, func() {
		m.observe(200, 3*time.Millisecond)
		m.firstByte(time.Millisecond)
	}); n != 0 {
		t.Errorf("%v allocations per request", n)
	}
}
