package server

import (
	"bufio"
	"errors"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// serve runs h behind newHTTPServer with the given limits on a loopback
// listener and returns its address.
func serve(t *testing.T, h http.Handler, l ListenerLimits) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(h, l, log.New(io.Discard, "", 0))
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// closedByServer waits (up to a generous bound the test never relies on
// for timing) until the server closes conn, reading and discarding any
// response on the way.
func closedByServer(t *testing.T, conn net.Conn) {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server did not close the connection")
	}
}

var tight = ListenerLimits{ReadHeaderTimeout: 200 * time.Millisecond, BodyReadTimeout: 200 * time.Millisecond,
	IdleTimeout: 200 * time.Millisecond, MaxHeaderBytes: 4 << 10}

// Clients that stall in their headers, withhold a body the handler waits
// for, withhold a body the handler never reads, or sit idle after a
// response are all disconnected by the server.
func TestListenerBoundsSlowClients(t *testing.T) {
	t.Parallel()
	reading := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err != nil {
			return // the body deadline passed
		}
		io.WriteString(w, "ok")
	})
	ignoring := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusUnauthorized) // answered without reading the body
	})
	cases := map[string]struct {
		h    http.Handler
		send string
	}{
		"partial headers":          {reading, "POST /v1/messages HTTP/1.1\r\nHost: x\r\n"},
		"withheld body, read":      {reading, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\""},
		"withheld body, not read":  {ignoring, "POST /v1/messages HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"a\""},
		"idle after a response":    {reading, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
		"connected, nothing sent":  {reading, ""},
		"idle after unread answer": {ignoring, "GET / HTTP/1.1\r\nHost: x\r\n\r\n"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			addr := serve(t, tc.h, tight)
			const clients = 8
			conns := make([]net.Conn, clients)
			for i := range conns {
				c, err := net.Dial("tcp", addr)
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
				if _, err := io.WriteString(c, tc.send); err != nil {
					t.Fatal(err)
				}
				conns[i] = c
			}
			for _, c := range conns {
				closedByServer(t, c)
			}
		})
	}
}

// The body bound is lifted once the body is read: a response that streams
// for longer than the bound is not cut, and its request context stays
// alive.
func TestBodyBoundDoesNotCutStreams(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		io.WriteString(w, "event: one\n\n")
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return // cut: the client sees no second event
		}
		io.WriteString(w, "event: two\n\n")
	})
	l := tight
	l.IdleTimeout = time.Minute
	addr := serve(t, h, l)
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Three body bounds pass while the stream is open (a client-side read
	// deadline, the one wait on the wire this test needs): the server
	// neither sends nor closes meanwhile, and its background read on the
	// connection must not have cancelled the request.
	conn.SetReadDeadline(time.Now().Add(3 * l.BodyReadTimeout))
	if _, err := br.Peek(br.Buffered() + 64); !isTimeout(err) {
		t.Fatalf("during the stream: %v, want the client's own timeout", err)
	}
	conn.SetReadDeadline(time.Time{})
	close(release)
	body, err := io.ReadAll(res.Body)
	if err != nil || !strings.Contains(string(body), "event: two") {
		t.Fatalf("stream cut after the body bound: %q, %v", body, err)
	}
}

// /readyz is 200 until the drain starts, then 503; /livez stays 200.
func TestLifecycleProbes(t *testing.T) {
	t.Parallel()
	life := &lifecycle{}
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusUnauthorized) })
	h := adminFront(api, http.NotFoundHandler(), life, "")
	get := func(path string) int {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		return rec.Code
	}
	if get("/readyz") != 200 || get("/livez") != 200 {
		t.Fatal("probes not 200 before the drain")
	}
	life.draining.Store(true)
	if get("/readyz") != 503 || get("/livez") != 200 {
		t.Fatalf("during the drain: readyz %d livez %d", get("/readyz"), get("/livez"))
	}
}

// The scrape token opens /metrics and nothing else; without it, /metrics
// falls to the admin API (which takes the admin token).
func TestScrapeTokenScope(t *testing.T) {
	t.Parallel()
	api := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") == "Bearer adm" {
			io.WriteString(w, "api:"+r.URL.Path)
			return
		}
		w.WriteHeader(http.StatusUnauthorized)
	})
	metrics := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "metrics") })
	h := adminFront(api, metrics, &lifecycle{}, "scrape-tok")
	do := func(method, path, tok string) (int, string) {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(method, path, nil)
		if tok != "" {
			req.Header.Set("Authorization", "Bearer "+tok)
		}
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if c, b := do("GET", "/metrics", "scrape-tok"); c != 200 || b != "metrics" {
		t.Fatalf("scrape token on /metrics: %d %q", c, b)
	}
	if c, b := do("GET", "/metrics", "adm"); c != 200 || b != "api:/metrics" {
		t.Fatalf("admin token on /metrics: %d %q", c, b)
	}
	for _, p := range []string{"/admin/v1/status", "/admin/v1/upstreams", "/admin/scheduler/failures", "/dashboard/"} {
		if c, _ := do("GET", p, "scrape-tok"); c != http.StatusUnauthorized {
			t.Errorf("scrape token on %s: %d, want 401", p, c)
		}
	}
	if c, _ := do("POST", "/metrics", "scrape-tok"); c != http.StatusUnauthorized {
		t.Errorf("scrape token POST /metrics: %d", c)
	}
	if c, _ := do("GET", "/metrics", "scrape-to"); c != http.StatusUnauthorized {
		t.Errorf("a wrong scrape token: %d", c)
	}
}

func TestScrapeTokenSources(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	if tok, err := scrapeToken(env(nil)); tok != "" || err != nil {
		t.Fatalf("none: %q %v", tok, err)
	}
	if tok, _ := scrapeToken(env(map[string]string{"PROXY_METRICS_TOKEN": " m1\n"})); tok != "m1" {
		t.Fatalf("env: %q", tok)
	}
	path := filepath.Join(dir, "metrics-token")
	os.WriteFile(path, []byte("m2\n"), 0o600)
	if tok, err := scrapeToken(env(map[string]string{"PROXY_METRICS_TOKEN_FILE": path})); tok != "m2" || err != nil {
		t.Fatalf("file: %q %v", tok, err)
	}
	os.Chmod(path, 0o644)
	_, err := scrapeToken(env(map[string]string{"PROXY_METRICS_TOKEN_FILE": path}))
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("0644 token file: %v", err)
	}
}

// The admin token file beside the SQLite database is refused at 0644.
func TestAdminTokenFileMode(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	dsn := filepath.Join(dir, "proxy.db")
	cfg := defaults()
	cfg.DatabaseURL = "sqlite://" + dsn
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := adminAuth(&cfg, env(nil)); err != nil {
		t.Fatal(err) // creates it at 0600
	}
	if _, _, err := adminAuth(&cfg, env(nil)); err != nil {
		t.Fatalf("0600 token file refused: %v", err)
	}
	os.Chmod(dsn+".admin-token", 0o644)
	_, _, err := adminAuth(&cfg, env(nil))
	if err == nil || !strings.Contains(err.Error(), dsn+".admin-token") || !strings.Contains(err.Error(), "0644") {
		t.Fatalf("0644 token file: %v", err)
	}
	// The master key file likewise.
	if _, _, err := masterKey(cfg.db, env(nil)); err != nil {
		t.Fatal(err)
	}
	os.Chmod(dsn+".key", 0o640)
	if _, _, err := masterKey(cfg.db, env(nil)); err == nil || !strings.Contains(err.Error(), "0640") {
		t.Fatalf("0640 key file: %v", err)
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
