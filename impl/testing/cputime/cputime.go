// Package cputime reads the CPU time a process has used, for benchmarks:
// on a shared machine a figure's wall time mostly measures the other
// tenants, its CPU time far less.
package cputime

import (
	"syscall"
	"time"
)

// Process is this process's user and system CPU time so far, every
// goroutine and thread included; zero if the kernel will not say.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
