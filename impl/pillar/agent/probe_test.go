package agent

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"google.golang.org/grpc/health"
)

func TestProbe(t *testing.T) {
	t.Parallel()
	hs := health.NewServer()
	get := func(path string) int {
		rec := httptest.NewRecorder()
		Probe{Health: hs}.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
		return rec.Code
	}
	if c := get("/healthz"); c != http.StatusOK {
		t.Fatalf("serving agent: %d", c)
	}
	if c := get("/other"); c != http.StatusNotFound {
		t.Fatalf("other path: %d", c)
	}
	hs.Shutdown()
	if c := get("/healthz"); c != http.StatusInternalServerError {
		t.Fatalf("stopped agent: %d", c)
	}
}
