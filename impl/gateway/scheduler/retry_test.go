package scheduler

import (
	"testing"
	"time"
)

// P-JOB-6: the seed's curves, exactly.
func TestRetryCurves(t *testing.T) {
	t.Parallel()
	s := time.Second
	cases := []struct {
		c    RetryClass
		max  int
		want []time.Duration
	}{
		{Probe, 3, []time.Duration{1 * s, 2 * s, 4 * s, 5 * s, 5 * s}},
		{Entity, 5, []time.Duration{30 * s, 60 * s, 120 * s, 240 * s, 480 * s, 600 * s}},
		{Maintenance, 1, []time.Duration{60 * s, 60 * s}},
	}
	for _, c := range cases {
		if c.c.MaxAttempts != c.max {
			t.Errorf("%s max attempts %d, want %d", c.c.Name, c.c.MaxAttempts, c.max)
		}
		for i, w := range c.want {
			if got := c.c.Delay(i + 1); got != w {
				t.Errorf("%s attempt %d: %v, want %v", c.c.Name, i+1, got, w)
			}
		}
	}
	// P-JOB-7: keep-alive jobs have max_attempts = 1.
	if KeepAlive.MaxAttempts != 1 {
		t.Fatal("keep-alive retries")
	}
}

// P-JOB-6: jitter stays within ±10 percent and covers the range.
func TestRetryJitterBounds(t *testing.T) {
	t.Parallel()
	for _, c := range []RetryClass{Probe, Entity, Maintenance} {
		for attempt := 1; attempt <= 6; attempt++ {
			base := c.Delay(attempt)
			lo, hi := time.Duration(float64(base)*0.9), time.Duration(float64(base)*1.1)
			if c.JitteredDelay(attempt, 0) != lo || c.JitteredDelay(attempt, 0.999999999) < hi-time.Millisecond {
				t.Fatalf("%s/%d: jitter range [%v, %v] not reached", c.Name, attempt, c.JitteredDelay(attempt, 0), c.JitteredDelay(attempt, 0.999999999))
			}
			for i := 0; i < 200; i++ {
				if d := c.NextDelay(attempt); d < lo || d > hi {
					t.Fatalf("%s/%d: %v outside [%v, %v]", c.Name, attempt, d, lo, hi)
				}
			}
		}
	}
}
