package bench

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestBlockSpreadTakesEachBlocksPercentile: blocks are consecutive rounds,
// and each block's ratio is its own percentile of added latency, gateway
// (and control) over bare.
func TestBlockSpreadTakesEachBlocksPercentile(t *testing.T) {
	const n = 10
	s := make([][]Sample, 4) // direct, gateway, bare, control
	for i := range s {
		s[i] = make([]Sample, n)
	}
	for r := 0; r < n; r++ {
		s[0][r].D = time.Millisecond
		s[1+Bare][r].D = time.Millisecond + 100*time.Microsecond
		s[1+Control][r].D = time.Millisecond + 100*time.Microsecond
		// The gateway adds 200 µs in the first half of the rounds, 100 µs after.
		s[1+Gateway][r].D = time.Millisecond + 100*time.Microsecond
		if r < n/2 {
			s[1+Gateway][r].D += 100 * time.Microsecond
		}
	}
	sp := blockSpread("p99", s, .99, 2)
	if len(sp.Gateway) != 2 || sp.Gateway[0] != 2 || sp.Gateway[1] != 1 {
		t.Fatalf("gateway ratios %v, want [2 1]", sp.Gateway)
	}
	if len(sp.Control) != 2 || sp.Control[0] != 1 || sp.Control[1] != 1 {
		t.Fatalf("control ratios %v, want [1 1]", sp.Control)
	}
	if got := spreadRange([]float64{1.2, 0.9, 1.0}); !strings.HasPrefix(got, "0.90–1.20x (median 1.00x)") {
		t.Fatalf("spreadRange = %q", got)
	}
	if sp := blockSpread("p99", s, .99, 20); len(sp.Gateway) != 0 {
		t.Fatalf("more blocks than rounds gave %v", sp.Gateway)
	}
}

// The router cost caption takes its block spread from the same blocks
// as the interleaved sections.
func TestRouterCostCaptionShowsTheBlockSpread(t *testing.T) {
	ms := func(n int, d time.Duration) []time.Duration { return slices.Repeat([]time.Duration{d}, n) }
	r := RouterCostResult{N: 20, Builtin: ms(20, 10*time.Microsecond), Plugin: ms(20, 12*time.Microsecond), Control: ms(20, 10*time.Microsecond)}
	if md := r.Markdown(); !strings.Contains(md, "plugin ÷ built-in 1.20–1.20x (median 1.20x), built-in′ ÷ built-in 1.00–1.00x") {
		t.Fatalf("caption:\n%s", md)
	}
	r.Builtin, r.Plugin, r.Control = r.Builtin[:5], r.Plugin[:5], r.Control[:5]
	if md := r.Markdown(); strings.Contains(md, "consecutive blocks") {
		t.Fatalf("a spread from fewer samples than blocks:\n%s", md)
	}
}
