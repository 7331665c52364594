package clock_test

import (
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
)

func TestRealTimersFire(t *testing.T) {
	t.Parallel()
	c := clock.Real{}
	fired := make(chan struct{})
	c.AfterFunc(time.Millisecond, func() { close(fired) })
	<-fired
	_, ch := c.NewTimer(time.Millisecond)
	at := <-ch
	if c.Since(at) < 0 {
		t.Fatalf("Since a past reading is negative: %v", c.Since(at))
	}
}

func TestOrDefaultsToReal(t *testing.T) {
	t.Parallel()
	if _, ok := clock.Or(nil).(clock.Real); !ok {
		t.Fatalf("Or(nil) = %T, want clock.Real", clock.Or(nil))
	}
	var mine clock.Clock = clock.Real{}
	if clock.Or(mine) != mine {
		t.Fatal("Or replaced a given clock")
	}
}
