package service_test

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pillarhq/pillar/impl/clock"
	"github.com/pillarhq/pillar/impl/service"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
)

type thing struct {
	service.Base
	Name string
}

func TestInitAppliesDefaultsOnce(t *testing.T) {
	t.Parallel()
	s := service.Init(service.Options{}, &thing{Name: "x"})
	if s.Logger == nil || s.Clock == nil || s.Name != "x" {
		t.Fatalf("defaults not applied: %+v", s)
	}
	if _, ok := s.Clock.(clock.Real); !ok {
		t.Fatalf("nil clock became %T, want clock.Real", s.Clock)
	}
	s.Logger.Info("discarded") // a nil logger must not be kept
	c, l := fakeclock.New(time.Time{}), slog.Default()
	s = service.Init(service.Options{Logger: l, Clock: c}, &thing{})
	if s.Logger != l || s.Clock != c {
		t.Fatal("Init replaced the given logger or clock")
	}
}

// Every calls f once per elapsed interval on the injected clock, never
// before, and returns when ctx ends.
func TestEveryTicksOnTheClock(t *testing.T) {
	t.Parallel()
	c := fakeclock.New(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan time.Time)
	done := make(chan struct{})
	go func() {
		defer close(done)
		service.Every(ctx, c, time.Minute, func(context.Context) { calls <- c.Now() })
	}()
	for i := 1; i <= 3; i++ {
		if d := <-c.Armed(); d != time.Minute {
			t.Fatalf("armed %v, want the interval", d)
		}
		c.Advance(59 * time.Second)
		select {
		case <-calls:
			t.Fatal("called before the interval passed")
		default:
		}
		c.Advance(time.Second)
		if at := <-calls; !at.Equal(fakeclock.Start.Add(time.Duration(i) * time.Minute)) {
			t.Fatalf("call %d at %v", i, at)
		}
	}
	cancel()
	<-done
}

// Stop ends the loops in reverse start order, each returned before the
// previous is cancelled, and leaves none running.
func TestGroupStopsInReverseOrder(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	g := &service.Group{}
	started := make(chan string, 3)
	for _, name := range []string{"a", "b", "c"} {
		g.Add(name, func(ctx context.Context) {
			started <- name
			<-ctx.Done()
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
		})
	}
	g.Add("off", nil)
	g.Start(context.Background())
	for range 3 {
		<-started
	}
	if got := g.Running(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("running %v", got)
	}
	g.Stop()
	if !slices.Equal(order, []string{"c", "b", "a"}) {
		t.Fatalf("stopped in order %v, want c b a", order)
	}
	if left := g.Running(); len(left) != 0 {
		t.Fatalf("loops left after Stop: %v", left)
	}
	g.Stop() // a second Stop finds them returned
}

// The context given to Start ending does not stop the loops: only Stop
// does, so shutdown order stays the Group's. After the start context is
// cancelled the loop still answers, and its own context is still live
// (cancelling a parent cancels its children before cancel returns).
func TestGroupIgnoresStartContext(t *testing.T) {
	t.Parallel()
	g := &service.Group{}
	ended := make(chan struct{})
	ask := make(chan chan error)
	g.Add("a", func(ctx context.Context) {
		defer close(ended)
		for {
			select {
			case <-ctx.Done():
				return
			case reply := <-ask:
				reply <- ctx.Err()
			}
		}
	})
	ctx, cancel := context.WithCancel(context.Background())
	g.Start(ctx)
	cancel()
	reply := make(chan error)
	select {
	case ask <- reply:
	case <-ended:
		t.Fatal("the loop ended with the start context")
	}
	if err := <-reply; err != nil {
		t.Fatalf("the loop's context ended with the start context: %v", err)
	}
	if got := g.Running(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("running %v after the start context ended", got)
	}
	g.Stop()
	<-ended
}
