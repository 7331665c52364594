package backendtest

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/backend"
)

// Call is one expected tool run and its scripted result.
type Call struct {
	// Cmd is the tool and its arguments joined by single spaces.
	Cmd    string
	Stdout string
	Stderr string
	// Exit is the exit status; -1 means the tool could not be started.
	Exit int
}

// Script is a backend.Runner that expects exactly its Calls, in order, and
// answers each with its scripted output. It checks the exact command lines
// a backend sends to the real tools.
type Script struct {
	T     testing.TB
	Calls []Call

	mu   sync.Mutex
	next int
}

var _ backend.Runner = (*Script)(nil)

// NewScript returns a script that fails the test if calls are left over.
func NewScript(t testing.TB, calls ...Call) *Script {
	s := &Script{T: t, Calls: calls}
	t.Cleanup(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.next < len(s.Calls) {
			t.Errorf("script: %d call(s) never made, first %q", len(s.Calls)-s.next, s.Calls[s.next].Cmd)
		}
	})
	return s
}

func (s *Script) Run(_ context.Context, name string, args ...string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	got := strings.Join(append([]string{name}, args...), " ")
	if s.next >= len(s.Calls) {
		s.T.Errorf("script: unexpected call %q", got)
		return nil, &backend.CommandError{Name: name, Args: args, ExitCode: 127, Stderr: "unexpected call"}
	}
	c := s.Calls[s.next]
	s.next++
	if got != c.Cmd {
		s.T.Errorf("script: call %d is %q, want %q", s.next, got, c.Cmd)
	}
	switch {
	case c.Exit < 0:
		return nil, &backend.CommandError{Name: name, Args: args, ExitCode: -1, Err: errNotStarted}
	case c.Exit > 0:
		return []byte(c.Stdout), &backend.CommandError{Name: name, Args: args, ExitCode: c.Exit, Stderr: c.Stderr}
	}
	return []byte(c.Stdout), nil
}

type notStarted struct{}

func (notStarted) Error() string { return "exec: executable file not found in $PATH" }

var errNotStarted error = notStarted{}
