package main

import (
	"strings"
	"testing"
	"time"
)

func series(d time.Duration, n int) []time.Duration {
	s := make([]time.Duration, n)
	for i := range s {
		s[i] = d
	}
	return s
}

func TestNoStall(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		r    result
		want bool
	}{
		{"within 2x, no control", result{quiet: series(ms, 100), loaded: series(2*ms, 100)}, true},
		{"over 2x, no control", result{quiet: series(ms, 100), loaded: series(3*ms, 100)}, false},
		{"over 2x, the control grew as much", result{quiet: series(ms, 100), loaded: series(3*ms, 100),
			bareQuiet: series(ms, 100), bareLoaded: series(3*ms, 100)}, true},
		{"over 2x, beyond the control's growth", result{quiet: series(ms, 100), loaded: series(4*ms, 100),
			bareQuiet: series(ms, 100), bareLoaded: series(3*ms, 100)}, false},
		{"a request over a second stalls whatever the control", result{quiet: series(ms, 100),
			loaded: append(series(ms, 99), 2*time.Second), bareQuiet: series(ms, 100), bareLoaded: append(series(ms, 99), 2*time.Second)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got, _ := noStall(tc.r); got != tc.want {
				t.Fatalf("noStall = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestMarkdownShowsTheControl(t *testing.T) {
	ms := time.Millisecond
	r := result{label: "PostgreSQL, 3 replicas", quiet: series(ms, 10), loaded: series(3*ms, 10),
		bareQuiet: series(ms, 10), bareLoaded: series(3*ms, 10)}
	md := markdown(params{bareBin: "bareproxy", workers: 8, writes: 20, proxyN: 10}, []result{r})
	if !strings.Contains(md, "control: bare proxy p99 quiet / loaded") || !strings.Contains(md, "| 1.00 / 3.00 ms | 3.00x | met |") {
		t.Fatalf("control columns missing:\n%s", md)
	}
	md = markdown(params{workers: 8, writes: 20, proxyN: 10}, []result{{label: "SQLite", quiet: series(ms, 10), loaded: series(3*ms, 10)}})
	if strings.Contains(md, "control") || !strings.Contains(md, "| 3.00x | **missed** |") {
		t.Fatalf("table without a control:\n%s", md)
	}
}
