// Package promtest reads the value of one Prometheus series in a test,
// from a registry or from a /metrics body, so tests assert on a counter or
// a gauge without walking metric families themselves.
package promtest

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are gathered or parsed metric families by name.
type Families map[string]*dto.MetricFamily

// Gather collects g's families.
func Gather(g prometheus.Gatherer) (Families, error) {
	mfs, err := g.Gather()
	if err != nil {
		return nil, err
	}
	fs := make(Families, len(mfs))
	for _, mf := range mfs {
		fs[mf.GetName()] = mf
	}
	return fs, nil
}

// Parse reads a /metrics body in the text exposition format.
func Parse(body []byte) (Families, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fs, err := p.TextToMetricFamilies(bytes.NewReader(body))
	return Families(fs), err
}

// Value is the value of the first series of family name that carries
// every label of labels (name, value pairs; other labels may be present):
// a counter's, gauge's or untyped value, a histogram's or summary's sample
// count. ok is false when the family or such a series is absent.
func (fs Families) Value(name string, labels ...string) (v float64, ok bool) {
	if len(labels)%2 != 0 {
		panic("promtest: labels are name, value pairs")
	}
	for _, m := range fs[name].GetMetric() {
		if carries(m, labels) {
			return value(m), true
		}
	}
	return 0, false
}

// Series is every series of family name by its labels, written
// name=value and joined by commas in the exposition's (name) order ("" for
// an unlabelled series), each with its value as Value reads it; empty when
// the family is absent.
func (fs Families) Series(name string) map[string]float64 {
	out := map[string]float64{}
	for _, m := range fs[name].GetMetric() {
		var key strings.Builder
		for i, l := range m.GetLabel() {
			if i > 0 {
				key.WriteByte(',')
			}
			key.WriteString(l.GetName() + "=" + l.GetValue())
		}
		out[key.String()] = value(m)
	}
	return out
}

func carries(m *dto.Metric, labels []string) bool {
	for i := 0; i < len(labels); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	case m.Summary != nil:
		return float64(m.Summary.GetSampleCount())
	}
	return m.GetUntyped().GetValue()
}

// TB is the part of testing.TB the helpers below use; Ginkgo's GinkgoT()
// has it too.
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
}

// Value gathers g and returns the value of the series (Families.Value),
// failing t when gathering fails or the series is absent.
func Value(t TB, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	fs, err := Gather(g)
	if err != nil {
		t.Fatalf("gather metrics: %v", err)
	}
	return must(t, fs, name, labels)
}

// TextValue is Value read from a /metrics body.
func TextValue(t TB, body []byte, name string, labels ...string) float64 {
	t.Helper()
	fs, err := Parse(body)
	if err != nil {
		t.Fatalf("parse metrics: %v", err)
	}
	return must(t, fs, name, labels)
}

func must(t TB, fs Families, name string, labels []string) float64 {
	t.Helper()
	v, ok := fs.Value(name, labels...)
	if !ok {
		t.Fatalf("no series %s", series(name, labels))
	}
	return v
}

// series renders name{label="value",…} for a failure message.
func series(name string, labels []string) string {
	var b bytes.Buffer
	b.WriteString(name)
	for i := 0; i < len(labels); i += 2 {
		if i == 0 {
			b.WriteByte('{')
		} else {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=%q", labels[i], labels[i+1])
	}
	if len(labels) > 0 {
		b.WriteByte('}')
	}
	return b.String()
}
