// Command propagation measures how long a configuration change made through
// one replica takes to be enforced by another (PostgreSQL LISTEN/NOTIFY and
// snapshot swap), by flipping a principal on replica A and polling the proxy
// path of replica B.
//
// With --bin-dir and --database-url it starts what it measures (make
// bench): bin/sim and two bin/proxy replicas on a fresh schema of that
// PostgreSQL server, and stops them (and drops the schema) afterwards.
package main

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"sort"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for seeding

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/testing/scaleseed"
)

var token string

// seedSizes is the configuration seeded in bulk before measuring (none by
// default).
var seedSizes scaleseed.Sizes

// seed writes seedSizes' rows (impl/testing/scaleseed), every upstream on
// the simulator with its key sealed under the replicas' master key.
func seed(dburl, masterKey, simURL, simKey string) error {
	k, err := secret.ParseKey(masterKey)
	if err != nil {
		return err
	}
	box, err := secret.New(k)
	if err != nil {
		return err
	}
	db, err := sql.Open("pgx", dburl)
	if err != nil {
		return err
	}
	defer db.Close()
	log.Printf("seeding %+v", seedSizes)
	return scaleseed.Seed(context.Background(), db, seedSizes, scaleseed.Options{Dialect: "postgres", BaseURL: simURL, APIKey: simKey, Seal: box})
}

func admin(base, method, path string, body any) map[string]any {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, base+path, rd)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fatal(err)
	}
	defer res.Body.Close()
	var m map[string]any
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		fatalf("%s %s: %d %s", method, path, res.StatusCode, b)
	}
	if err := json.Unmarshal(b, &m); err != nil {
		fatalf("%s %s: %v: %s", method, path, err, b)
	}
	return m
}

func probe(proxy, key string) int {
	req, _ := http.NewRequest("POST", proxy+"/v1/messages", strings.NewReader(`{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		fatal(err)
	}
	_, _ = io.Copy(io.Discard, res.Body) // only the status is probed
	res.Body.Close()
	return res.StatusCode
}

func main() {
	adminA := flag.String("admin-a", "", "admin URL of replica A")
	proxyB := flag.String("proxy-b", "", "proxy URL of replica B")
	sim := flag.String("sim", "", "sim URL")
	simKey := flag.String("sim-key", "", "sim API key")
	n := flag.Int("n", 200, "changes to measure")
	out := flag.String("out", "", "markdown file to append to")
	binDir := flag.String("bin-dir", "", "start bin/sim and two bin/proxy replicas from this directory (with --database-url)")
	dbURL := flag.String("database-url", "", "PostgreSQL server for the replicas (with --bin-dir; a fresh schema is used)")
	flag.IntVar(&seedSizes.Principals, "seed-principals", 0, "seed this many principals before replica B starts (with --bin-dir)")
	flag.IntVar(&seedSizes.Keys, "seed-keys", 0, "seeded keys, spread over the seeded principals")
	flag.IntVar(&seedSizes.Upstreams, "seed-upstreams", 0, "seeded upstreams (all on the simulator)")
	flag.IntVar(&seedSizes.Chains, "seed-chains", 0, "seeded principals with a custom (pinned) router chain")
	flag.Parse()
	token = os.Getenv("PROXY_ADMIN_TOKEN")
	if *binDir != "" {
		if *dbURL == "" {
			log.Fatal("--bin-dir needs --database-url")
		}
		token = "bench-" + bench.RandomHex(16)
		*simKey = "sk-sim-bench-" + bench.RandomHex(8)
		startStack(*binDir, *dbURL, *simKey, adminA, proxyB, sim)
		defer stopStack()
	}
	admin(*adminA, "POST", "/admin/v1/upstreams", map[string]any{"name": "sim", "kind": "vendor_api_key", "base_url": *sim, "api_key_value": *simKey})
	pr := admin(*adminA, "POST", "/admin/v1/principals", map[string]any{"name": "prop", "kind": "machine", "allowed_models": []string{"*"}})["id"].(string)
	key := admin(*adminA, "POST", "/admin/v1/principals/"+pr+"/keys", nil)["key"].(string)
	for probe(*proxyB, key) != 200 {
		time.Sleep(10 * time.Millisecond)
	}
	var ds []time.Duration
	for i := 0; i < *n; i++ {
		op, want := "disable", 403
		if i%2 == 1 {
			op, want = "enable", 200
		}
		start := time.Now()
		admin(*adminA, "POST", "/admin/v1/principals/"+pr+"/"+op, nil)
		for probe(*proxyB, key) != want {
			if time.Since(start) > 5*time.Second {
				fatalf("change %d not seen by replica B after 5s", i)
			}
		}
		ds = append(ds, time.Since(start))
	}
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	p := func(q float64) time.Duration { return ds[int(float64(len(ds)-1)*q)] }
	ok := "yes"
	if p(0.99) > 100*time.Millisecond {
		ok = "**no**"
	}
	table := fmt.Sprintf("| changes | p50 | p99 | max | target p99 < 100 ms met |\n|---|---|---|---|---|\n| %d | %.1f ms | %.1f ms | %.1f ms | %s |\n",
		len(ds), ms(p(.5)), ms(p(.99)), ms(ds[len(ds)-1]), ok)
	fmt.Print(table)
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			fatal(err)
		}
		size := ""
		if seedSizes != (scaleseed.Sizes{}) {
			size = fmt.Sprintf(" at scale (%d principals, %d keys, %d upstreams, %d custom chains)", seedSizes.Principals, seedSizes.Keys, seedSizes.Upstreams, seedSizes.Chains)
		}
		fmt.Fprintf(f, "\n## Replica propagation (PostgreSQL)%s\n\nTime from an admin change committed through replica A to the first request on replica B that obeys it\n(the admin round trip included): LISTEN/NOTIFY, generation check, snapshot rebuild and swap.\n\n%s", size, table)
		f.Close()
	}
}

// cleanups run before an exit, on success or failure: the stack's
// processes stop and the schema is dropped.
var cleanups []func()

func stopStack() {
	for i := len(cleanups) - 1; i >= 0; i-- {
		cleanups[i]()
	}
	cleanups = nil
}

func fatal(err error) { stopStack(); log.Fatal(err) }

func fatalf(format string, a ...any) { stopStack(); log.Fatalf(format, a...) }

// startStack starts the simulator and replica A, then replica B once A
// is up (A migrates the schema; they do not race to), and sets the URLs.
func startStack(binDir, serverURL, simKey string, adminA, proxyB, simURL *string) {
	dir, err := os.MkdirTemp("", "propagation.")
	if err != nil {
		fatal(err)
	}
	cleanups = append(cleanups, func() { os.RemoveAll(dir) })
	dburl, drop, err := bench.FreshSchema(context.Background(), serverURL)
	if err != nil {
		fatal(err)
	}
	cleanups = append(cleanups, drop)
	st := bench.NewStack(binDir, dir)
	cleanups = append(cleanups, st.Stop)
	addr := func() string {
		a, err := bench.FreeAddr()
		if err != nil {
			fatal(err)
		}
		return a
	}
	sim, pa, aa, pb, ab := addr(), addr(), addr(), addr(), addr()
	env := map[string]string{"PROXY_ADMIN_TOKEN": token, "PROXY_MASTER_KEY": bench.RandomHex(32)}
	start := func(label, bin, up string, args ...string) {
		p, err := st.Start(label, bin, args, env)
		if err == nil {
			err = st.WaitUp(p, up)
		}
		if err != nil {
			fatal(err)
		}
	}
	replica := func(p, a string) []string {
		return []string{"--proxy-listen", p, "--admin-listen", a, "--database-url", dburl, "--log-level", "warn", "--allow-private-upstreams"}
	}
	p, err := st.Start("sim", "sim", []string{"--listen", sim, "--api-key", simKey}, nil)
	if err != nil {
		fatal(err)
	}
	start("replica-a", "proxy", "http://"+aa+"/admin/v1/status", replica(pa, aa)...)
	if seedSizes != (scaleseed.Sizes{}) {
		// Seeded once A has migrated the schema and before B starts; A
		// picks the rows up at its next rebuild.
		if err := seed(dburl, env["PROXY_MASTER_KEY"], "http://"+sim, simKey); err != nil {
			fatal(err)
		}
	}
	start("replica-b", "proxy", "http://"+ab+"/admin/v1/status", replica(pb, ab)...)
	if err := st.WaitUp(p, "http://"+sim+"/_sim/clock"); err != nil {
		fatal(err)
	}
	*adminA, *proxyB, *simURL = "http://"+aa, "http://"+pb, "http://"+sim
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
