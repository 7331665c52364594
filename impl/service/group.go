package service

import (
	"context"
	"log/slog"
	"slices"
	"sync"
)

// Loop runs until ctx ends; it is one background loop of a Group.
type Loop func(ctx context.Context)

// Group is the list of a binary's background loops: Start runs them in the
// order added, Stop ends them in reverse order, each returned before the
// one added before it is told to stop, so a loop may rely on those added
// earlier while it winds down.
type Group struct {
	Logger *slog.Logger // nil: discards

	mu    sync.Mutex
	loops []named // added, not started yet
	runs  []*run  // started, returned or not
}

type named struct {
	name string
	loop Loop
}

type run struct {
	name   string
	cancel context.CancelFunc
	done   chan struct{}
}

// Add appends a loop; a nil loop (a service configured off) is skipped.
func (g *Group) Add(name string, l Loop) {
	if l == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.loops = append(g.loops, named{name, l})
}

// Start runs every loop added, each in its own goroutine under a context
// derived from ctx (without its cancellation: only Stop ends the loops).
func (g *Group) Start(ctx context.Context) {
	g.mu.Lock()
	defer g.mu.Unlock()
	base := context.WithoutCancel(ctx)
	for _, l := range g.loops {
		lctx, cancel := context.WithCancel(base)
		r := &run{name: l.name, cancel: cancel, done: make(chan struct{})}
		g.runs = append(g.runs, r)
		go func(l Loop) { defer close(r.done); l(lctx) }(l.loop)
	}
	g.loops = nil
}

// Stop ends the running loops in reverse order and waits for each; a
// second Stop finds them returned.
func (g *Group) Stop() {
	g.mu.Lock()
	rs := slices.Clone(g.runs)
	g.mu.Unlock()
	log := g.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for i := len(rs) - 1; i >= 0; i-- {
		rs[i].cancel()
		<-rs[i].done
		log.Debug("background loop stopped", "loop", rs[i].name)
	}
}

// Running names the loops started and not yet returned, in start order.
func (g *Group) Running() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	var ns []string
	for _, r := range g.runs {
		select {
		case <-r.done:
		default:
			ns = append(ns, r.name)
		}
	}
	return ns
}
