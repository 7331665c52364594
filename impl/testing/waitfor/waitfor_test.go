package waitfor_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

// recorder is a TB that keeps the failure instead of failing the test.
type recorder struct {
	testing.TB
	failed string
}

func (r *recorder) Helper() {}
func (r *recorder) Fatalf(format string, args ...any) {
	r.failed = fmt.Sprintf(format, args...)
	panic(r) // Fatalf must not return; the test recovers it
}

func run(tb *recorder, f func()) {
	defer func() {
		if p := recover(); p != nil && p != any(tb) {
			panic(p)
		}
	}()
	f()
}

// The condition is polled until it holds; Until returns then, without a
// failure, having called it exactly as often as needed.
func TestUntilReturnsOnceTheConditionHolds(t *testing.T) {
	calls := 0
	waitfor.Until(t, "the third call", func() error {
		calls++
		if calls < 3 {
			return fmt.Errorf("call %d", calls)
		}
		return nil
	})
	if calls != 3 {
		t.Fatalf("condition called %d times, want 3", calls)
	}
}

// A condition that never holds fails the test once the context ends, with
// what was awaited and the condition's last word.
func TestUntilFailsWithWhatAndTheLastState(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := &recorder{TB: t}
	calls := 0
	run(r, func() {
		waitfor.UntilContext(ctx, r, "five events written", func() error {
			calls++
			return fmt.Errorf("%d of 5 written", calls)
		})
		t.Error("UntilContext returned after its context ended")
	})
	if calls != 1 || !strings.Contains(r.failed, "five events written") || !strings.Contains(r.failed, "1 of 5 written") {
		t.Fatalf("%d calls, failure %q", calls, r.failed)
	}
}

// Poll is the form for code without a test: it returns the last state
// wrapped with the context's error.
func TestPollReturnsTheLastStateWhenTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := waitfor.Poll(ctx, time.Millisecond, func() error { return errors.New("not yet") })
	if !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "not yet") {
		t.Fatalf("Poll: %v", err)
	}
	if err := waitfor.Poll(ctx, time.Millisecond, func() error { return nil }); err != nil {
		t.Fatalf("a condition that holds at once: %v", err)
	}
}

// True is Until for a plain condition.
func TestTrue(t *testing.T) {
	n := 0
	waitfor.True(t, "n reaches 2", func() bool { n++; return n == 2 })
	if n != 2 {
		t.Fatalf("called %d times", n)
	}
}
