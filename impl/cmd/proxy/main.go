// Command proxy is the LLM gateway: the Anthropic-compatible proxy listener
// and the admin API, configured at runtime from its database.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pillarhq/pillar/impl/gateway/server"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts the drain; a second one ends the process at
	// once (the default action, restored here).
	go func() { <-ctx.Done(); stop() }()
	if err := server.Main(ctx, os.Args[1:], os.Getenv, os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, "proxy:", err)
		os.Exit(1)
	}
}
