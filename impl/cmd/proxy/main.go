// Command proxy is the LLM gateway: the Anthropic-compatible proxy listener
// and the admin API, configured at runtime from its database.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/pillarhq/pillar/impl/cli"
	"github.com/pillarhq/pillar/impl/gateway/server"
)

func main() {
	if len(os.Args) == 2 && (os.Args[1] == "--version" || os.Args[1] == "-version") {
		fmt.Println("proxy", server.Version)
		return
	}
	server.TuneGC(os.Getenv)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts the drain; a second one ends the process at
	// once (the default action, restored here).
	go func() { <-ctx.Done(); stop() }()
	if code := cli.ExitCode("proxy", server.Main(ctx, os.Args[1:], os.Getenv, os.Stderr), os.Stderr); code != 0 {
		os.Exit(code)
	}
}
