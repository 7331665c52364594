// Package cli holds what the binaries' commands share: usage
// errors (exit status 2, as a flag error always was) and the few lines of
// main that wire signals to a product package's Main.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

// UsageError is a bad command line: the command exits with status 2.
type UsageError struct {
	Err error
	// Printed: the flag package has already told the user (with the
	// usage text), so the command prints nothing more.
	Printed bool
}

func (e *UsageError) Error() string { return e.Err.Error() }
func (e *UsageError) Unwrap() error { return e.Err }

// Usage marks err (often several, joined) as a usage error; nil stays nil.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return &UsageError{Err: err}
}

// ExitCode prints err as "name: err" on stderr (a usage error: a line per
// problem, unless already printed)
// and returns the process's exit status: 0 without error, 2 for a usage
// error, 1 otherwise.
func ExitCode(name string, err error, stderr io.Writer) int {
	if err == nil {
		return 0
	}
	var u *UsageError
	if !errors.As(err, &u) {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	if !u.Printed {
		// One line per problem, each as a lone error always read.
		for _, line := range strings.Split(err.Error(), "\n") {
			fmt.Fprintf(stderr, "%s: %s\n", name, line)
		}
	}
	return 2
}

// MainFunc is a product package's Main.
type MainFunc func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error

// Run is a command's main: SIGINT and SIGTERM end ctx (a graceful stop),
// then the process exits with ExitCode's status.
func Run(name string, main MainFunc) {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	err := main(ctx, os.Args[1:], os.Getenv, os.Stderr)
	stop()
	os.Exit(ExitCode(name, err, os.Stderr))
}
