// Command propagation measures how long a configuration change made through
// one replica takes to be enforced by another (PostgreSQL LISTEN/NOTIFY and
// snapshot swap), by flipping a principal on replica A and polling the proxy
// path of replica B. It starts bin/sim and two bin/proxy replicas on a
// fresh schema of the PostgreSQL server it is given, and stops them (and
// drops the schema) afterwards.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver, for seeding

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/impl/gateway/secret"
	"github.com/pillarhq/pillar/impl/testing/scaleseed"
)

func main() { bench.Main("propagation", run) }

func run(ctx context.Context, args []string) error {
	var sz scaleseed.Sizes
	fs := flag.NewFlagSet("propagation", flag.ContinueOnError)
	n := fs.Int("n", 200, "changes to measure")
	out := fs.String("out", "", "markdown file to append to")
	binDir := fs.String("bin-dir", "bin", "directory of bin/sim and bin/proxy")
	dbURL := fs.String("database-url", "", "PostgreSQL server for the replicas (a fresh schema is used)")
	fs.IntVar(&sz.Principals, "seed-principals", 0, "seed this many principals before replica B starts")
	fs.IntVar(&sz.Keys, "seed-keys", 0, "seeded keys, spread over the seeded principals")
	fs.IntVar(&sz.Upstreams, "seed-upstreams", 0, "seeded upstreams (all on the simulator)")
	fs.IntVar(&sz.Chains, "seed-chains", 0, "seeded principals with a custom (pinned) router chain")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *dbURL == "" {
		return errors.New("--database-url is required")
	}
	dir, err := os.MkdirTemp("", "propagation.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	dburl, drop, err := bench.FreshSchema(ctx, *dbURL)
	if err != nil {
		return err
	}
	defer drop()
	st := bench.NewStack(*binDir, dir)
	defer st.Stop()
	sim, err := st.StartSim()
	if err != nil {
		return err
	}
	replica := bench.ProxyOptions{DatabaseURL: dburl, Token: "bench-" + harness.RandomHex(16), Env: map[string]string{"PROXY_MASTER_KEY": harness.RandomHex(32)}}
	replica.Label = "replica-a"
	a, err := st.StartProxy(replica)
	if err != nil {
		return err
	}
	if sz != (scaleseed.Sizes{}) {
		// Seeded once A has migrated the schema and before B starts; A
		// picks the rows up at its next rebuild.
		if err := seed(ctx, dburl, replica.Env["PROXY_MASTER_KEY"], sim, sz); err != nil {
			return err
		}
	}
	replica.Label = "replica-b"
	b, err := st.StartProxy(replica)
	if err != nil {
		return err
	}
	key, pr, err := bench.Seed(a.Admin, sim.VendorUpstream())
	if err != nil {
		return err
	}
	// obeyed waits until replica B answers key's request with want.
	obeyed := func(want int, within time.Duration) error {
		for start := time.Now(); ; {
			got, err := probe(b.URL, key)
			if err != nil || got == want {
				return err
			}
			if time.Since(start) > within {
				return fmt.Errorf("replica B still answers %d, not %d, after %v", got, want, within)
			}
		}
	}
	if err := obeyed(http.StatusOK, time.Minute); err != nil {
		return err
	}
	var ds []time.Duration
	for i := 0; i < *n; i++ {
		op, want := "disable", http.StatusForbidden
		if i%2 == 1 {
			op, want = "enable", http.StatusOK
		}
		start := time.Now()
		if _, err := a.Admin.Call("POST", "/admin/v1/principals/"+pr+"/"+op, nil, http.StatusOK); err != nil {
			return err
		}
		if err := obeyed(want, 5*time.Second); err != nil {
			return fmt.Errorf("change %d: %w", i, err)
		}
		ds = append(ds, time.Since(start))
	}
	p99 := bench.Percentile(ds, .99)
	table := fmt.Sprintf("| changes | p50 | p99 | max | target p99 < 100 ms met |\n|---|---|---|---|---|\n| %d | %.1f ms | %.1f ms | %.1f ms | %s |\n",
		len(ds), bench.Ms(bench.Percentile(ds, .5)), bench.Ms(p99), bench.Ms(bench.Percentile(ds, 1)), map[bool]string{true: "yes", false: "**no**"}[p99 <= 100*time.Millisecond])
	fmt.Print(table)
	if *out == "" {
		return nil
	}
	size := ""
	if sz != (scaleseed.Sizes{}) {
		size = fmt.Sprintf(" at scale (%d principals, %d keys, %d upstreams, %d custom chains)", sz.Principals, sz.Keys, sz.Upstreams, sz.Chains)
	}
	f, err := os.OpenFile(*out, os.O_APPEND|os.O_WRONLY|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n## Replica propagation (PostgreSQL)%s\n\nTime from an admin change committed through replica A to the first request on replica B that obeys it\n(the admin round trip included): LISTEN/NOTIFY, generation check, snapshot rebuild and swap.\n\n%s", size, table)
	return errors.Join(err, f.Close())
}

// probe sends one request through the proxy at base and returns its status.
func probe(base, key string) (int, error) {
	req, err := http.NewRequest("POST", base+"/v1/messages", strings.NewReader(`{"model":"claude-x","max_tokens":1,"messages":[{"role":"user","content":"x"}]}`))
	if err != nil {
		return 0, err
	}
	req.Header.Set("x-api-key", key)
	req.Header.Set("anthropic-version", "2023-06-01")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, res.Body) // only the status is probed
	res.Body.Close()
	return res.StatusCode, nil
}

// seed writes sz's rows (impl/testing/scaleseed), every upstream on the
// simulator with its key sealed under the replicas' master key.
func seed(ctx context.Context, dburl, masterKey string, sim *bench.Sim, sz scaleseed.Sizes) error {
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
	bench.Logf("seeding %+v", sz)
	return scaleseed.Seed(ctx, db, sz, scaleseed.Options{Dialect: "postgres", BaseURL: sim.URL, APIKey: sim.Key, Seal: box})
}
