package alerts

import (
	"math"
	"testing"
	"time"
)

// The forecast is the least-squares line through the samples, taken from
// the last sample to the reset: samples 40, 41, 42 % an hour apart with
// 10 h left forecast 52 %; noise around the line does not move the slope.
func TestForecastIsLinearToReset(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	reset := t0.Add(12 * time.Hour)
	var tr trend
	for i, u := range []float64{40, 41, 42} {
		tr.add(sample{at: t0.Add(time.Duration(i) * time.Hour), util: u}, reset, 6*time.Hour)
	}
	if got, ok := tr.forecast(30 * time.Minute); !ok || math.Abs(got-52) > 1e-9 {
		t.Fatalf("forecast %v %v, want 52", got, ok)
	}
	var noisy trend
	for i, u := range []float64{40.5, 40.5, 42.5, 42.5} {
		noisy.add(sample{at: t0.Add(time.Duration(i) * time.Hour), util: u}, reset, 6*time.Hour)
	}
	// x̄ = 1.5 h, ȳ = 41.5; Σdx·dy = (-1.5)(-1)+(-0.5)(-1)+(0.5)(1)+(1.5)(1) = 4, Σdx² = 5: 0.8 %/h.
	if got, _ := noisy.forecast(30 * time.Minute); math.Abs(got-(42.5+0.8*9)) > 1e-9 {
		t.Fatalf("noisy forecast %v, want %v", got, 42.5+0.8*9)
	}
}

// No trend from one poll, from polls closer together than the least span,
// or from the same poll read twice; a new reset time starts over; samples
// older than the span drop out.
func TestTrendSamples(t *testing.T) {
	t0 := time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC)
	reset := t0.Add(48 * time.Hour)
	var tr trend
	tr.add(sample{at: t0, util: 10}, reset, 80*time.Minute)
	tr.add(sample{at: t0, util: 10}, reset, 80*time.Minute)
	if _, ok := tr.forecast(30 * time.Minute); ok || len(tr.samples) != 1 {
		t.Fatalf("one poll (read twice): %d samples, forecast %v", len(tr.samples), ok)
	}
	tr.add(sample{at: t0.Add(20 * time.Minute), util: 11}, reset, 80*time.Minute)
	if _, ok := tr.forecast(30 * time.Minute); ok {
		t.Fatal("forecast from 20 minutes of samples")
	}
	tr.add(sample{at: t0.Add(90 * time.Minute), util: 12}, reset, 80*time.Minute)
	if len(tr.samples) != 2 || !tr.samples[0].at.Equal(t0.Add(20*time.Minute)) {
		t.Fatalf("samples past the span kept: %+v", tr.samples)
	}
	tr.add(sample{at: t0.Add(100 * time.Minute), util: 1}, reset.Add(7*24*time.Hour), 80*time.Minute)
	if len(tr.samples) != 1 || tr.samples[0].util != 1 {
		t.Fatalf("a new window kept the old samples: %+v", tr.samples)
	}
}
