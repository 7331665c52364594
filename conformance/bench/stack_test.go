package bench_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/conformance/harness/runner"
)

func TestSeedCreatesUpstreamPrincipalAndKey(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization")+" "+r.URL.Path+" "+string(b))
		mu.Unlock()
		switch r.URL.Path {
		case "/admin/v1/upstreams":
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"up_1"}`)
		case "/admin/v1/principals":
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"pr_1"}`)
		case "/admin/v1/principals/pr_1/keys":
			w.WriteHeader(201)
			fmt.Fprint(w, `{"id":"k_1","key":"sk-px-bench"}`)
		default:
			http.NotFound(w, r)
		}
	}))
	defer admin.Close()
	sim := &bench.Sim{URL: "http://sim", Key: "sk-sim"}
	key, pr, err := bench.Seed(&harness.Admin{Base: admin.URL, Token: "tok"}, sim.VendorUpstream())
	if err != nil || key != "sk-px-bench" || pr != "pr_1" {
		t.Fatalf("key %q, principal %q, err %v", key, pr, err)
	}
	want := []string{
		`Bearer tok /admin/v1/upstreams {"api_key_value":"sk-sim","base_url":"http://sim","kind":"vendor_api_key","name":"sim"}`,
		`Bearer tok /admin/v1/principals {"allowed_models":["*"],"kind":"machine","name":"bench"}`,
		`Bearer tok /admin/v1/principals/pr_1/keys {}`,
	}
	if strings.Join(seen, "\n") != strings.Join(want, "\n") {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(seen, "\n"), strings.Join(want, "\n"))
	}
}

func TestAdminCallRefusalIsAnError(t *testing.T) {
	admin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		fmt.Fprint(w, `{"error":{"code":"invalid_request"}}`)
	}))
	defer admin.Close()
	_, err := (&harness.Admin{Base: admin.URL, Token: "tok"}).Call("POST", "/admin/v1/principals", map[string]any{}, 201)
	if err == nil || !strings.Contains(err.Error(), "400") || !strings.Contains(err.Error(), "invalid_request") {
		t.Fatalf("err = %v", err)
	}
}

// serve is a stand-in binary: it answers on --listen until stopped.
func serve(ctx context.Context, args []string, _ func(string) string, stderr io.Writer) error {
	ln, err := net.Listen("tcp", args[1])
	if err != nil {
		return err
	}
	fmt.Fprintln(stderr, "serving")
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

func crash(context.Context, []string, func(string) string, io.Writer) error {
	return errors.New("boom: bad flag")
}

func TestStackStartsWaitsAndStops(t *testing.T) {
	dir := t.TempDir()
	st := &bench.Stack{Runner: runner.InProcess{Mains: map[string]runner.MainFunc{"svc": serve, "bad": crash}}, Dir: dir}
	addr, err := harness.ListenAddr()
	if err != nil {
		t.Fatal(err)
	}
	p, err := st.Start("one", "svc", []string{"--listen", addr}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.WaitUp(p, "http://"+addr+"/"); err != nil {
		t.Fatal(err)
	}
	bad, err := st.Start("two", "bad", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	// WaitUp gives up as soon as the process has ended, with its log.
	<-bad.Done()
	nobody, _ := harness.ListenAddr()
	if err := st.WaitUp(bad, "http://"+nobody+"/"); err == nil || !strings.Contains(err.Error(), "boom: bad flag") {
		t.Errorf("WaitUp of a crashed process: %v", err)
	}
	st.Stop()
	if !p.Exited() {
		t.Error("Stop left a process running")
	}
	if b, _ := os.ReadFile(dir + "/one.log"); string(b) != "serving\n" {
		t.Errorf("one.log = %q", b)
	}
}

func TestFreshSchema(t *testing.T) {
	server := os.Getenv("TEST_DATABASE_URL")
	if server == "" {
		if os.Getenv("CI") == "true" {
			t.Fatal("TEST_DATABASE_URL is required in CI")
		}
		t.Skip("TEST_DATABASE_URL not set")
	}
	ctx := context.Background()
	u, drop, err := bench.FreshSchema(ctx, server)
	if err != nil {
		t.Fatal(err)
	}
	pu, _ := url.Parse(u)
	schema := pu.Query().Get("search_path")
	conn, err := pgx.Connect(ctx, u)
	if err != nil {
		drop()
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var got string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&got); err != nil || got != schema || !strings.HasPrefix(schema, "bench_") {
		t.Errorf("current_schema %q (%v), want %q", got, err, schema)
	}
	drop()
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.schemata WHERE schema_name = $1", schema).Scan(&n); err != nil || n != 0 {
		t.Errorf("schema %s after drop: %d (%v)", schema, n, err)
	}
}
