package server

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
)

// Shutdown closes the usage recorder only after every proxy handler
// returned: wait reports a handler still running, and returns once the
// last one ended, whether it returned or aborted (panicked).
func TestInFlightWaitsForHandlers(t *testing.T) {
	t.Parallel()
	f := newInFlight()
	entered, release := make(chan struct{}, 2), make(chan struct{})
	h := f.wrap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered <- struct{}{}
		<-release
		if r.URL.Path == "/abort" {
			panic(http.ErrAbortHandler)
		}
	}))
	ended := make(chan struct{}, 2)
	for _, path := range []string{"/v1/messages", "/abort"} {
		go func() {
			defer func() { _ = recover(); ended <- struct{}{} }()
			h.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", path, nil))
		}()
	}
	<-entered
	<-entered
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	if f.wait(gone) {
		t.Fatal("wait returned with two handlers running")
	}
	close(release)
	if !f.wait(context.Background()) {
		t.Fatal("wait gave up with no deadline")
	}
	<-ended
	<-ended
	if n := f.n.Load(); n != 0 {
		t.Fatalf("%d handlers counted after both returned", n)
	}
}
