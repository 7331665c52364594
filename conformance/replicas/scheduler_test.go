package replicas_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// jobCounts counts River rows per (job_type, idempotency_key).
func jobCounts(db string) map[string]int {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, db)
	Expect(err).NotTo(HaveOccurred())
	defer conn.Close(context.Background())
	rows, err := conn.Query(ctx, "SELECT args->>'job_type', args->>'idempotency_key', count(*) FROM river_job GROUP BY 1, 2")
	Expect(err).NotTo(HaveOccurred())
	out := map[string]int{}
	for rows.Next() {
		var typ, key string
		var n int
		Expect(rows.Scan(&typ, &key, &n)).To(Succeed())
		out[typ+" "+key] = n
	}
	return out
}

var _ = Describe("Durable scheduler across replicas", func() {
	It("pushes every tick from every replica but keeps exactly one job per tick", Label("P-TOPO-1", "P-TOPO-2", "P-JOB-1", "P-JOB-2"), func() {
		c := newCluster(3)
		var counts map[string]int
		Eventually(func() int { counts = jobCounts(c.db); return len(counts) }, 15*time.Second, 100*time.Millisecond).Should(BeNumerically(">=", 2))
		Consistently(func() map[string]int { return jobCounts(c.db) }, 2*time.Second, 200*time.Millisecond).Should(Equal(counts))
		types := map[string]bool{}
		for k, n := range counts {
			Expect(n).To(Equal(1), k)
			types[strings.Fields(k)[0]] = true
		}
		Expect(types).To(HaveKey("usage_rollup"))
		Expect(types).To(HaveKey("prune"))
	})

	It("shows recurring jobs with their next run and the failure tickets, behind the admin token", Label("P-API-4", "P-API-5", "P-VER-1", "P-OPS-1"), func() {
		c := newCluster(1)
		a := c.replicas[0].Admin()
		// next_run_at is read from the job table (scheduler area): right
		// after start the start-up ticks may still be due, so wait until
		// the workers ran them.
		Eventually(func(g Gomega) {
			st := a.JSON("GET", "/admin/scheduler/status", nil, 200)
			jobs := st["recurring_jobs"].([]any)
			g.Expect(jobs).NotTo(BeEmpty())
			for _, j := range jobs {
				m := j.(map[string]any)
				g.Expect(m["next_run_at_unix_secs"]).NotTo(BeNil())
				next := time.Unix(int64(m["next_run_at_unix_secs"].(float64)), 0)
				g.Expect(next).To(BeTemporally(">", time.Now().Add(-time.Second)))
				g.Expect(m["next_run_at"]).NotTo(BeEmpty())
			}
		}, 20*time.Second, 200*time.Millisecond).Should(Succeed())
		f := a.JSON("GET", "/admin/scheduler/failures?job_type=prune", nil, 200)
		Expect(f).To(HaveKey("failures"))
		(&h.Admin{Base: c.replicas[0].AdminURL}).ExpectError("GET", "/admin/scheduler/status", nil, 401, "unauthorized")
		(&h.Admin{Base: c.replicas[0].AdminURL}).ExpectError("GET", "/admin/scheduler/failures", nil, 401, "unauthorized")
	})

	It("exports every scheduler metric of the seed with its label sets registered up front",
		Label("P-MET-1", "P-MET-2", "P-MET-3", "P-MET-4", "P-MET-5", "P-MET-6", "P-MET-7", "P-MET-8"), func() {
			c := newCluster(1)
			_, _, b := c.replicas[0].Admin().Do("GET", "/metrics", nil)
			parser := expfmt.NewTextParser(model.UTF8Validation)
			fams, err := parser.TextToMetricFamilies(strings.NewReader(string(b)))
			Expect(err).NotTo(HaveOccurred())
			for _, name := range []string{"svc_scheduler_jobs_total", "svc_scheduler_job_duration_seconds", "svc_scheduler_failures_total",
				"svc_scheduler_init_failure", "svc_scheduler_lazy_refresh_timeout_total", "svc_scheduler_prune_rows_removed_total",
				"svc_scheduler_price_catalog_status_total", "svc_scheduler_prompt_cache_purge_rows_removed_total"} {
				Expect(fams).To(HaveKey(name))
			}
			statuses := map[string]bool{}
			for _, m := range fams["svc_scheduler_jobs_total"].Metric {
				for _, l := range m.Label {
					if l.GetName() == "status" {
						statuses[l.GetValue()] = true
					}
				}
			}
			Expect(statuses).To(HaveLen(6))
			tables := map[string]bool{}
			for _, m := range fams["svc_scheduler_prune_rows_removed_total"].Metric {
				tables[m.Label[0].GetValue()] = true
			}
			// The seed's three tables and captured_exchanges, which the same
			// job prunes (docs/capture.md): all there before the first prune.
			Expect(tables).To(Equal(map[string]bool{"request_events": true, "audit_log": true, "upstream_affinity": true, "captured_exchanges": true}))
			Expect(fams["svc_scheduler_init_failure"].Metric[0].Gauge.GetValue()).To(Equal(0.0))
		})
})

var _ = Describe("Metadata jobs", func() {
	It("refreshes upstream models and installs the fetched price catalog on every replica", Label("P-TOPO-3", "P-MET-7", "P-MET-9"), func() {
		sim := h.StartSim(simKey)
		db := h.FreshSchema()
		token, master := "adm-"+h.RandomHex(12), h.RandomHex(32)
		var reps []*h.Proxy
		for i := 0; i < 2; i++ {
			reps = append(reps, h.StartProxy(h.ProxyOptions{DatabaseURL: db, Token: token, MasterKey: master, Args: []string{
				"--reconcile-interval", "1s", "--price-catalog-url", sim.URL + "/catalog/prices.json",
				"--job-interval", "metadata_refresh=1s", "--job-interval", "price_catalog_fetch=1s"}}))
		}
		a := reps[0].Admin()
		up := a.CreateUpstream("sim", sim.URL, simKey)
		Eventually(func() int {
			_, _, b := a.Do("GET", "/admin/v1/upstreams/"+up+"/models", nil)
			var ms []map[string]any
			json.Unmarshal(b, &ms)
			return len(ms)
		}, 20*time.Second, 200*time.Millisecond).Should(Equal(3))
		for _, r := range reps {
			Eventually(func() any {
				return r.Admin().JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
			}, 20*time.Second, 200*time.Millisecond).Should(Equal("v1"))
		}
		res, err := http.Post(sim.URL+"/_sim/catalog", "application/json", strings.NewReader(`{"version":2}`))
		Expect(err).NotTo(HaveOccurred())
		res.Body.Close()
		for _, r := range reps {
			Eventually(func() any {
				return r.Admin().JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
			}, 20*time.Second, 200*time.Millisecond).Should(Equal("v2"))
		}
		// Across both replicas: two applied fetches, and unchanged ones counted as noop.
		counts := map[string]float64{}
		Eventually(func() float64 {
			counts = map[string]float64{}
			for _, r := range reps {
				for _, st := range []string{"noop", "applied"} {
					counts[st] += r.Admin().Metric("svc_scheduler_price_catalog_status_total", "status", st)
				}
				counts["metadata_ok"] += r.Admin().Metric("svc_scheduler_metadata_refresh_status_total", "status", "ok")
			}
			return counts["noop"]
		}, 20*time.Second, 200*time.Millisecond).Should(BeNumerically(">=", 1))
		Expect(counts["applied"]).To(Equal(2.0))
		Expect(counts["metadata_ok"]).To(BeNumerically(">=", 1))
		// The provider saw model listings with the upstream's key.
		var listed bool
		for _, rq := range sim.Requests() {
			if rq.Path == "/v1/models" {
				listed = true
				Expect(rq.Header.Get("X-Api-Key")).To(Equal(simKey))
			}
		}
		Expect(listed).To(BeTrue())
	})
})

var _ = Describe("A worker dying mid-job", func() {
	It("has its job retried by another replica within the job's retry class", Label("P-JOB-4"), func() {
		c := newCluster(2, "--scheduler-rescue-after", "3s", "--job-interval", "metadata_refresh=5s")
		// The first model listing hangs, pinning its job on one replica.
		c.sim.Fault(map[string]any{"path": "/v1/models", "count": 1, "latency_ms": 120000})
		c.replicas[0].Admin().CreateUpstream("sim", c.sim.URL, simKey)

		type row struct {
			ID          int64
			State       string
			Attempt     int
			AttemptedBy []string
		}
		query := func(where string, args ...any) []row {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			conn, err := pgx.Connect(ctx, c.db)
			Expect(err).NotTo(HaveOccurred())
			defer conn.Close(context.Background())
			rows, err := conn.Query(ctx, "SELECT id, state::text, attempt, coalesce(attempted_by, '{}') FROM river_job WHERE args->>'job_type' = 'metadata_refresh' AND "+where, args...)
			Expect(err).NotTo(HaveOccurred())
			var out []row
			for rows.Next() {
				var r row
				Expect(rows.Scan(&r.ID, &r.State, &r.Attempt, &r.AttemptedBy)).To(Succeed())
				out = append(out, r)
			}
			return out
		}
		var stuck row
		Eventually(func() int {
			rs := query("state = 'running'")
			if len(rs) > 0 {
				stuck = rs[0]
			}
			return len(rs)
		}, 30*time.Second, 100*time.Millisecond).Should(Equal(1))
		Expect(stuck.AttemptedBy).To(HaveLen(1))
		victim := stuck.AttemptedBy[0]
		for _, r := range c.replicas {
			if strings.Contains(strings.Join(r.Opts.Args, " "), "--replica-id "+victim) {
				r.Kill()
			}
		}
		// The rescuer of the surviving replica takes the job for dead and
		// another attempt completes it there.
		Eventually(func(g Gomega) row {
			rs := query("id = $1", stuck.ID)
			g.Expect(rs).To(HaveLen(1))
			return rs[0]
		}, 120*time.Second, 500*time.Millisecond).Should(And(
			HaveField("State", "completed"),
			HaveField("Attempt", 2),
		))
		final := query("id = $1", stuck.ID)[0]
		Expect(final.AttemptedBy).To(HaveLen(2))
		Expect(final.AttemptedBy[1]).NotTo(Equal(victim))
	})
})
