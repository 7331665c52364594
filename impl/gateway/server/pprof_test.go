package server

import (
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// startForTest runs the whole proxy (listeners included) on a fresh SQLite
// file with extra arguments and returns it once it serves.
func startForTest(t *testing.T, args []string, vars map[string]string) *running {
	t.Helper()
	dir := t.TempDir()
	e := map[string]string{"PROXY_ADMIN_TOKEN": "adm-token-for-tests"}
	for k, v := range vars {
		e[k] = v
	}
	args = append([]string{"--database-url", "sqlite://" + filepath.Join(dir, "p.db"), "--proxy-listen", "127.0.0.1:0", "--admin-listen", "127.0.0.2:0"}, args...)
	cfg, err := ParseConfig(args, env(e), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	r, err := start(context.Background(), cfg, env(e), slog.New(slog.DiscardHandler), io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.shutdown() })
	return r
}

func get(t *testing.T, url, token string) (int, []byte) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, url, nil)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, b
}

// The profiling endpoint is off unless configured: the admin API answers
// its own 404 for /debug/pprof/ even with the admin token.
func TestPprofOffByDefault(t *testing.T) {
	t.Parallel()
	r := startForTest(t, nil, nil)
	if r.adminSrv == nil {
		t.Fatal("not started")
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/profile?seconds=1"} {
		code, body := get(t, "http://"+r.adminAddr+p, "adm-token-for-tests")
		if code != http.StatusNotFound || !strings.Contains(string(body), `"not_found"`) {
			t.Errorf("GET %s with pprof off: %d %s", p, code, body)
		}
	}
}

// Enabled, it answers only on the admin listener and only to the admin
// token; the proxy listener never serves it (nor net/http/pprof's
// registration on http.DefaultServeMux).
func TestPprofOnAdminListenerWithToken(t *testing.T) {
	t.Parallel()
	r := startForTest(t, []string{"--debug-pprof"}, nil)
	admin, proxy := "http://"+r.adminAddr, "http://"+r.proxyAddr

	leaked := func(body []byte) bool {
		return bytes.Contains(body, []byte("goroutine profile:")) || bytes.Contains(body, []byte("Types of profiles available"))
	}
	for _, p := range []string{"/debug/pprof/", "/debug/pprof/heap", "/debug/pprof/goroutine?debug=1", "/debug/pprof/profile?seconds=1"} {
		if code, body := get(t, admin+p, ""); code != http.StatusUnauthorized || leaked(body) {
			t.Errorf("GET %s without a token: %d %.200s", p, code, body)
		}
		if code, _ := get(t, admin+p, "wrong-token"); code != http.StatusUnauthorized {
			t.Errorf("GET %s with a wrong token: %d", p, code)
		}
		if code, body := get(t, proxy+p, "adm-token-for-tests"); code != http.StatusNotFound || leaked(body) {
			t.Errorf("GET %s on the proxy listener: %d %.200s", p, code, body)
		}
	}

	code, body := get(t, admin+"/debug/pprof/", "adm-token-for-tests")
	if code != http.StatusOK || !leaked(body) {
		t.Fatalf("index: %d %.300s", code, body)
	}
	code, body = get(t, admin+"/debug/pprof/goroutine?debug=1", "adm-token-for-tests")
	if code != http.StatusOK || !bytes.Contains(body, []byte("goroutine profile:")) {
		t.Fatalf("goroutine dump: %d %.300s", code, body)
	}
	// A CPU profile runs for the seconds asked and comes back as the
	// gzipped protobuf go tool pprof reads, naming its sample type.
	start := time.Now()
	code, body = get(t, admin+"/debug/pprof/profile?seconds=1", "adm-token-for-tests")
	if code != http.StatusOK {
		t.Fatalf("profile: %d %.300s", code, body)
	}
	zr, err := gzip.NewReader(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("profile is not gzipped: %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil || !bytes.Contains(raw, []byte("nanoseconds")) || !bytes.Contains(raw, []byte("cpu")) || time.Since(start) < time.Second {
		t.Fatalf("not a 1 s CPU profile (%v, %d bytes after %s)", err, len(raw), time.Since(start))
	}
	// The command line (which may hold a database password) is not served.
	if code, _ := get(t, admin+"/debug/pprof/cmdline", "adm-token-for-tests"); code != http.StatusNotFound {
		t.Errorf("cmdline: %d, want 404", code)
	}
}

// debug.pprof binds from the file, PROXY_DEBUG_PPROF and --debug-pprof,
// in that order of precedence; a bad variable is refused with the key.
func TestPprofConfig(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	os.WriteFile(path, []byte("debug:\n  pprof: true\n"), 0o600)
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want bool
	}{
		{nil, nil, false},
		{[]string{"--config", path}, nil, true},
		{[]string{"--config", path}, map[string]string{"PROXY_DEBUG_PPROF": "false"}, false},
		{nil, map[string]string{"PROXY_DEBUG_PPROF": "1"}, true},
		{[]string{"--debug-pprof=false"}, map[string]string{"PROXY_DEBUG_PPROF": "true"}, false},
		{[]string{"--debug-pprof"}, nil, true},
	} {
		c, err := ParseConfig(tc.args, env(tc.env), io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		if c.Debug.Pprof != tc.want {
			t.Errorf("%v %v: pprof %v, want %v", tc.args, tc.env, c.Debug.Pprof, tc.want)
		}
	}
	_, err := ParseConfig(nil, env(map[string]string{"PROXY_DEBUG_PPROF": "yes please"}), io.Discard)
	if err == nil || !strings.Contains(err.Error(), "debug.pprof") {
		t.Fatalf("bad PROXY_DEBUG_PPROF: %v", err)
	}
}
