package server

import "runtime/debug"

// DefaultGCPercent is the proxy's garbage collection target when GOGC is
// not set. Its live heap is a few MB, so Go's default of 100 starts a
// collection every few MB allocated; each mark phase takes a processor and
// assists from the request goroutines for milliseconds, and after the
// request-event writer it was what the slowest proxied requests overlapped
// most (docs/operations.md, "Garbage collection"). 400 collects a quarter as
// often for a peak heap of five times the live one instead of two; GOGC and
// GOMEMLIMIT still apply as the operator sets them.
const DefaultGCPercent = 400

// TuneGC applies DefaultGCPercent unless GOGC is set; bin/proxy calls it
// before Main.
func TuneGC(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(DefaultGCPercent)
	}
}
