package alerts

import "time"

// sample is one polled utilisation of an upstream's 7-day window.
type sample struct {
	at   time.Time
	util float64 // percent
}

// trend keeps an upstream's recent 7-day utilisation samples, one per
// usage poll, for the window that resets at resetsAt.
type trend struct {
	resetsAt time.Time
	samples  []sample
}

// add records a poll's sample: a new reset time starts a new window (the
// old samples describe the one that ended), a poll already recorded is
// not counted twice, and samples older than span before the newest are
// dropped.
func (t *trend) add(s sample, resetsAt time.Time, span time.Duration) {
	if !resetsAt.Equal(t.resetsAt) {
		t.resetsAt, t.samples = resetsAt, t.samples[:0]
	}
	if n := len(t.samples); n > 0 && !s.at.After(t.samples[n-1].at) {
		return
	}
	t.samples = append(t.samples, s)
	i := 0
	for i < len(t.samples) && s.at.Sub(t.samples[i].at) > span {
		i++
	}
	t.samples = append(t.samples[:0], t.samples[i:]...)
}

// forecast extrapolates the utilisation to the window's reset along the
// least-squares line through the samples: u_last + slope × (reset −
// t_last). ok is false when the samples cover less than minSpan (no
// trend yet).
func (t *trend) forecast(minSpan time.Duration) (atReset float64, ok bool) {
	n := len(t.samples)
	if n < 2 || t.samples[n-1].at.Sub(t.samples[0].at) < minSpan {
		return 0, false
	}
	t0 := t.samples[0].at
	var mx, my float64
	for _, s := range t.samples {
		mx += s.at.Sub(t0).Seconds()
		my += s.util
	}
	mx, my = mx/float64(n), my/float64(n)
	var sxy, sxx float64
	for _, s := range t.samples {
		dx := s.at.Sub(t0).Seconds() - mx
		sxy += dx * (s.util - my)
		sxx += dx * dx
	}
	last := t.samples[n-1]
	slope := sxy / sxx // percent per second
	left := t.resetsAt.Sub(last.at).Seconds()
	if left < 0 {
		left = 0
	}
	return last.util + slope*left, true
}
