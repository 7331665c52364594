package backend

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// Runner runs one storage tool and returns its standard output. A tool
// that ran and failed yields a *CommandError.
type Runner interface {
	Run(ctx context.Context, name string, args ...string) ([]byte, error)
}

// CommandError is a failed tool run.
type CommandError struct {
	Name string
	Args []string
	// ExitCode is the tool's exit status, or -1 when it did not run.
	ExitCode int
	// Stderr is what the tool printed on standard error.
	Stderr string
	// Err is the underlying error when the tool did not run.
	Err error
}

func (e *CommandError) Error() string {
	cmd := strings.TrimSpace(e.Name + " " + strings.Join(e.Args, " "))
	if e.ExitCode < 0 {
		return fmt.Sprintf("%s: %v", cmd, e.Err)
	}
	var lines []string
	for _, l := range strings.Split(e.Stderr, "\n") {
		if l = strings.TrimSpace(l); l != "" {
			lines = append(lines, l)
		}
	}
	msg := strings.Join(lines, "; ")
	if msg == "" {
		return fmt.Sprintf("%s: exit status %d", cmd, e.ExitCode)
	}
	return fmt.Sprintf("%s: exit status %d: %s", cmd, e.ExitCode, msg)
}

func (e *CommandError) Unwrap() error { return e.Err }

// DidNotRun reports whether the tool could not be started at all (not
// installed, not executable).
func (e *CommandError) DidNotRun() bool { return e.ExitCode < 0 }

// ExecRunner runs the tools as processes.
type ExecRunner struct {
	// Dir, when set, is where the tools are looked up instead of PATH
	// (e.g. a directory of fakestorage symlinks).
	Dir string
	// Env is added to the agent's environment.
	Env []string
}

var _ Runner = (*ExecRunner)(nil)

// toolEnv pins the tools' language, because error handling matches their
// English messages, and quiets LVM's warning about descriptors the agent
// leaves open.
var toolEnv = []string{"LC_ALL=C", "LANG=C", "LVM_SUPPRESS_FD_WARNINGS=1"}

// Run runs name with args, waiting for it or for ctx.
func (r *ExecRunner) Run(ctx context.Context, name string, args ...string) ([]byte, error) {
	path := name
	if r.Dir != "" {
		path = filepath.Join(r.Dir, name)
	}
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.Env = append(append(os.Environ(), toolEnv...), r.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	// Prompts read end of input and answer no, as without a terminal.
	cmd.Stdin = nil
	err := cmd.Run()
	if err == nil {
		return stdout.Bytes(), nil
	}
	ce := &CommandError{Name: name, Args: args, Stderr: stderr.String(), ExitCode: -1, Err: err}
	var exitErr *exec.ExitError
	if errors.As(err, &exitErr) && exitErr.ExitCode() >= 0 && ctx.Err() == nil {
		ce.ExitCode, ce.Err = exitErr.ExitCode(), nil
	} else if ctx.Err() != nil {
		ce.Err = ctx.Err()
	}
	return stdout.Bytes(), ce
}
