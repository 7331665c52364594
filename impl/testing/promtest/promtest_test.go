package promtest_test

import (
	"bytes"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	"github.com/pillarhq/pillar/impl/testing/promtest"
)

// registry holds a counter vector, a gauge, a histogram and an unlabelled
// counter with known values.
func registry(t *testing.T) *prometheus.Registry {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_requests_total", Help: "h"}, []string{"code", "upstream"})
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "t_queue", Help: "h"})
	h := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "t_seconds", Help: "h"}, []string{"slot"})
	plain := prometheus.NewCounter(prometheus.CounterOpts{Name: "t_plain_total", Help: "h"})
	reg.MustRegister(c, g, h, plain)
	c.WithLabelValues("200", "a").Add(3)
	c.WithLabelValues("503", "a").Add(1)
	c.WithLabelValues("200", "b").Add(5)
	g.Set(-2.5)
	h.WithLabelValues("router").Observe(0.1)
	h.WithLabelValues("router").Observe(0.2)
	plain.Inc()
	return reg
}

// body is reg's /metrics text.
func body(t *testing.T, reg *prometheus.Registry) []byte {
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.Bytes()
}

// The same series read from the registry and from its /metrics text give
// the same value: a series matched on a subset of its labels, a gauge, a
// histogram's sample count, an unlabelled counter.
func TestValueFromRegistryAndText(t *testing.T) {
	reg := registry(t)
	text := body(t, reg)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"t_requests_total", []string{"code", "503"}, 1},
		{"t_requests_total", []string{"upstream", "b"}, 5},
		{"t_requests_total", []string{"code", "200", "upstream", "a"}, 3},
		{"t_queue", nil, -2.5},
		{"t_seconds", []string{"slot", "router"}, 2},
		{"t_plain_total", nil, 1},
	} {
		if got := promtest.Value(t, reg, c.name, c.labels...); got != c.want {
			t.Errorf("registry %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
		if got := promtest.TextValue(t, text, c.name, c.labels...); got != c.want {
			t.Errorf("text %s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
}

// Series lists a family's series by their joined labels.
func TestSeries(t *testing.T) {
	fs, err := promtest.Parse(body(t, registry(t)))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"code=200,upstream=a": 3, "code=503,upstream=a": 1, "code=200,upstream=b": 5}
	if got := fs.Series("t_requests_total"); !maps.Equal(got, want) {
		t.Errorf("series %v, want %v", got, want)
	}
	if got := fs.Series("t_queue"); !maps.Equal(got, map[string]float64{"": -2.5}) {
		t.Errorf("unlabelled gauge %v", got)
	}
	if got := fs.Series("t_missing_total"); len(got) != 0 {
		t.Errorf("absent family %v", got)
	}
}

// An absent family or series is reported absent by Families.Value and
// fails the test through Value, naming the series.
func TestAbsentSeries(t *testing.T) {
	reg := registry(t)
	fs, err := promtest.Gather(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, q := range [][]string{{"t_missing_total"}, {"t_requests_total", "code", "404"}, {"t_requests_total", "code", "200", "upstream", "c"}} {
		if v, ok := fs.Value(q[0], q[1:]...); ok {
			t.Errorf("%v found: %v", q, v)
		}
	}
	f := &fatal{}
	promtest.Value(f, reg, "t_requests_total", "code", "404")
	if !strings.Contains(f.msg, `t_requests_total{code="404"}`) {
		t.Errorf("failure %q does not name the series", f.msg)
	}
	f = &fatal{}
	promtest.TextValue(f, []byte("not the exposition format {"), "t_queue")
	if !strings.Contains(f.msg, "parse metrics") {
		t.Errorf("failure on a bad body: %q", f.msg)
	}
}

// fatal records the failure instead of ending the test.
type fatal struct{ msg string }

func (*fatal) Helper() {}
func (f *fatal) Fatalf(format string, args ...any) {
	if f.msg == "" {
		f.msg = fmt.Sprintf(format, args...)
	}
}
