package server

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
)

// inFlight counts the proxy's handlers running, so shutdown can wait until
// each has handed its request event to the usage recorder before that
// closes: http.Server.Close closes connections but does not wait for the
// handlers still running on them.
type inFlight struct {
	n       atomic.Int64
	waiting atomic.Bool
	once    sync.Once
	idle    chan struct{} // closed once n is zero while waiting
}

func newInFlight() *inFlight { return &inFlight{idle: make(chan struct{})} }

// wrap counts h's calls in flight.
func (f *inFlight) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.n.Add(1)
		defer f.done() // also when the handler aborts (panics)
		h.ServeHTTP(w, r)
	})
}

func (f *inFlight) done() {
	if f.n.Add(-1) == 0 && f.waiting.Load() {
		f.once.Do(func() { close(f.idle) })
	}
}

// wait returns true once no handler runs, false when ctx ends first. Once
// it was called, a count dropping to zero is final: the listener is closed
// by then, so no handler starts any more.
func (f *inFlight) wait(ctx context.Context) bool {
	f.waiting.Store(true)
	if f.n.Load() == 0 {
		return true
	}
	select {
	case <-f.idle:
		return true
	case <-ctx.Done():
		return false
	}
}
