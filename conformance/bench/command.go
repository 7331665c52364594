package bench

import (
	"context"
	"fmt"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"
)

// Main is the whole main of a bench command: run gets a context cancelled
// by SIGINT or SIGTERM and the arguments; its error ends the process with
// status 1 after the deferred clean-ups of run have run.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}

// Logf is the progress log of every command, on stderr with a timestamp.
var Logf = log.New(os.Stderr, "", log.LstdFlags).Printf

// Ms expresses d in milliseconds, the unit of the scale tables.
func Ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// Emit prints a command's markdown and writes it to out when out is set.
func Emit(md, out string) error {
	fmt.Print(md)
	if out == "" {
		return nil
	}
	return os.WriteFile(out, []byte(md), 0o644)
}
