package server

import (
	"runtime/debug"
	"testing"
)

// bin/proxy collects less often than Go's default unless GOGC says
// otherwise (docs/operations.md, "Garbage collection"); an operator's GOGC
// is left alone.
func TestTuneGCUnlessGOGCIsSet(t *testing.T) {
	prev := debug.SetGCPercent(100)
	defer debug.SetGCPercent(prev)
	TuneGC(func(string) string { return "" })
	if p := debug.SetGCPercent(100); p != DefaultGCPercent {
		t.Errorf("GC percent %d, want %d", p, DefaultGCPercent)
	}
	TuneGC(func(k string) string {
		if k == "GOGC" {
			return "100"
		}
		return ""
	})
	if p := debug.SetGCPercent(100); p != 100 {
		t.Errorf("with GOGC set, GC percent %d, want it untouched (100)", p)
	}
}
