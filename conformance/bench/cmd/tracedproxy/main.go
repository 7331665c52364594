// Command tracedproxy is bin/proxy (server.Main) with a Go execution trace
// of its whole run written to the file TRACEDPROXY_OUT: make bench runs it
// in place of bin/proxy for the tail analysis of the interleaved series
// (what the gateway was doing while its slowest requests waited). It is a
// bench tool only; bin/proxy itself carries no tracing.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime/trace"
	"syscall"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/gateway/server"
)

func main() {
	out := os.Getenv("TRACEDPROXY_OUT")
	if out == "" {
		fmt.Fprintln(os.Stderr, "tracedproxy: TRACEDPROXY_OUT is not set")
		os.Exit(2)
	}
	server.TuneGC(os.Getenv) // as bin/proxy
	f, err := os.Create(out)
	if err != nil {
		fmt.Fprintln(os.Stderr, "tracedproxy:", err)
		os.Exit(1)
	}
	if err := trace.Start(f); err != nil {
		fmt.Fprintln(os.Stderr, "tracedproxy:", err)
		os.Exit(1)
	}
	// Unlike bin/proxy, a second signal does not end the process at once
	// (the bench's Stop sends two): the trace must be written out whole.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	code := cli.ExitCode("proxy", server.Main(ctx, os.Args[1:], os.Getenv, os.Stderr), os.Stderr)
	trace.Stop()
	f.Close()
	os.Exit(code)
}
