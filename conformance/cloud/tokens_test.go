package cloud_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/pillarhq/pillar/impl/gateway/cloud"
	"github.com/pillarhq/pillar/impl/testing/fakeclock"
	"github.com/pillarhq/pillar/sim/provider"
)

// tokenWire sends to the sim, refuses token requests while down, and
// keeps the bearer each Vertex request carried.
type tokenWire struct {
	mu       sync.Mutex
	down     bool
	attempts int
	bearers  []string
}

func (w *tokenWire) RoundTrip(r *http.Request) (*http.Response, error) {
	w.mu.Lock()
	if r.URL.Path == provider.VertexTokenPath {
		w.attempts++
		if w.down {
			w.mu.Unlock()
			return nil, errors.New("token endpoint unreachable")
		}
	} else {
		w.bearers = append(w.bearers, r.Header.Get("Authorization"))
	}
	w.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

func (w *tokenWire) setDown(down bool) { w.mu.Lock(); w.down = down; w.mu.Unlock() }

func (w *tokenWire) counts() (attempts int, lastBearer string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.bearers) > 0 {
		lastBearer = w.bearers[len(w.bearers)-1]
	}
	return w.attempts, lastBearer
}

// refreshWorld is a Vertex transport on the sim whose tokens live an hour,
// refreshed by clk.
func refreshWorld(t *testing.T) (*provider.Provider, *cloud.Vertex, *fakeclock.Clock, *tokenWire) {
	t.Helper()
	p := provider.New(provider.Options{VertexTokenTTL: time.Hour})
	srv := newServer(t, p)
	// The clock starts at the wall clock's time, as the token library
	// stamps expiries by that.
	clk := fakeclock.New(time.Now())
	wire := &tokenWire{}
	ts, err := cloud.VertexTokens(context.Background(), p.ServiceAccountJSON(srv), wire, clk, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p, &cloud.Vertex{Endpoint: srv, Project: "sim-project", Region: "us-east5", Tokens: ts,
		Models: map[string]string{alias: vertexID}, Next: wire}, clk, wire
}

func create(t *testing.T, rt http.RoundTripper) error {
	t.Helper()
	_, err := sdk(rt).Messages.New(context.Background(), params("hi"))
	return err
}

// A token far from its expiry is used as it is; one within five minutes
// of it is replaced before the request leaves, and the request carries the
// new one.
func TestVertexTokenRefreshedAheadOfExpiry(t *testing.T) {
	p, rt, clk, wire := refreshWorld(t)
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	_, first := wire.counts()
	clk.Advance(50 * time.Minute) // ten minutes left
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	if n, b := p.VertexTokenRequests(), mustBearer(t, wire); n != 1 || b != first {
		t.Fatalf("far from expiry: %d token requests, bearer changed %v", n, b != first)
	}
	clk.Advance(6 * time.Minute) // four minutes left
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	second := mustBearer(t, wire)
	if n := p.VertexTokenRequests(); n != 2 || second == first {
		t.Fatalf("near expiry: %d token requests, bearer changed %v", n, second != first)
	}
	// The new token's hour runs from its fetch: no refresh right after.
	clk.Advance(time.Minute)
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	if n := p.VertexTokenRequests(); n != 2 || mustBearer(t, wire) != second {
		t.Fatalf("after the refresh: %d token requests", n)
	}
}

func mustBearer(t *testing.T, w *tokenWire) string {
	t.Helper()
	_, b := w.counts()
	if !strings.HasPrefix(b, "Bearer ya29.sim-") {
		t.Fatalf("bearer %q", b)
	}
	return b
}

// A refresh that fails while the token is still valid keeps the token and
// is tried again after 30 seconds, not on every request; once the token
// has expired, a failed refresh fails the request.
func TestVertexFailedRefreshKeepsTheValidToken(t *testing.T) {
	_, rt, clk, wire := refreshWorld(t)
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	first := mustBearer(t, wire)
	wire.setDown(true)
	clk.Advance(56 * time.Minute)
	for range 2 {
		if err := create(t, rt); err != nil {
			t.Fatalf("a failed refresh before expiry failed the request: %v", err)
		}
	}
	if a, b := wire.counts(); a != 2 || b != first {
		t.Fatalf("token attempts %d (want the first and one failed refresh), bearer kept %v", a, b == first)
	}
	clk.Advance(31 * time.Second)
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	if a, _ := wire.counts(); a != 3 {
		t.Fatalf("no retry after 30s: %d attempts", a)
	}
	clk.Advance(4 * time.Minute) // past the first token's hour
	if err := create(t, rt); err == nil || !strings.Contains(err.Error(), "no access token") {
		t.Fatalf("an expired token with a failing refresh: %v", err)
	}
	wire.setDown(false)
	if err := create(t, rt); err != nil {
		t.Fatal(err)
	}
	if mustBearer(t, wire) == first {
		t.Fatal("the refreshed token was not used")
	}
}

// Requests that find the token due wait for one refresh rather than each
// fetching their own.
func TestVertexConcurrentRequestsRefreshOnce(t *testing.T) {
	p, rt, clk, _ := refreshWorld(t)
	burst := func() {
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		for range 8 {
			wg.Go(func() { errs <- create(t, rt) })
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	burst()
	if n := p.VertexTokenRequests(); n != 1 {
		t.Fatalf("8 first requests: %d token requests", n)
	}
	clk.Advance(57 * time.Minute)
	burst()
	if n := p.VertexTokenRequests(); n != 2 {
		t.Fatalf("8 requests near expiry: %d token requests", n)
	}
}

func newServer(t *testing.T, p *provider.Provider) string {
	t.Helper()
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A model the map does not rename reaches the platform as named, and the
// answer names it so too: the client always sees the name it sent.
func TestUnmappedModelIsAnsweredAsNamed(t *testing.T) {
	p, srv := startSim(t)
	vt, _ := vertexTransport(t, p, srv.URL)
	for name, rt := range map[string]http.RoundTripper{"bedrock": bedrockTransport(srv.URL, provider.DefaultAWSSecretAccessKey), "vertex": vt} {
		pr := params("raw id")
		pr.Model = "claude-raw-id-v1"
		msg, err := sdk(rt).Messages.New(context.Background(), pr)
		if err != nil {
			t.Fatal(err)
		}
		s := sdk(rt).Messages.NewStreaming(context.Background(), pr)
		var acc anthropic.Message
		for s.Next() {
			if err := acc.Accumulate(s.Current()); err != nil {
				t.Fatal(err)
			}
		}
		if s.Err() != nil || msg.Model != "claude-raw-id-v1" || acc.Model != "claude-raw-id-v1" {
			t.Fatalf("%s: create %q, stream %q %v", name, msg.Model, acc.Model, s.Err())
		}
	}
}
