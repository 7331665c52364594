package faults_test

import (
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	_ "modernc.org/sqlite"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// The durable scheduler under faults (scheduler area, issue 18.6): a
// stalled cron and a scheduler that cannot start.

const schedFaultKey = "sk-ant-api03-faults-sched"

const schedFaultBody = `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hello scheduler faults"}]}`

// schedKeyedWorld is a proxy with an API-key upstream on the sim and a
// principal's key.
func schedKeyedWorld(o h.ProxyOptions) (*h.Sim, *h.Proxy, string) {
	sim := h.StartSim(schedFaultKey)
	px := h.StartProxy(o)
	a := px.Admin()
	a.CreateUpstream("keyed", sim.URL, schedFaultKey)
	_, key := a.IssueKey(a.CreatePrincipal("app", "claude-*"))
	return sim, px, key
}

// recurring returns the status entry of one periodic job type and the
// response's Date.
func recurring(a *h.Admin, jobType string) (map[string]any, time.Time) {
	st, hd, b := a.Do("GET", "/admin/scheduler/status", nil)
	Expect(st).To(Equal(200), string(b))
	date, err := http.ParseTime(hd.Get("Date"))
	Expect(err).NotTo(HaveOccurred())
	var body struct {
		RecurringJobs []map[string]any `json:"recurring_jobs"`
	}
	Expect(json.Unmarshal(b, &body)).To(Succeed())
	for _, j := range body.RecurringJobs {
		if j["job_type"] == jobType {
			return j, date
		}
	}
	Fail("no recurring job " + jobType + " in " + string(b))
	return nil, date
}

var _ = Describe("Scheduler faults", func() {
	for _, d := range drivers {
		It("shows a stalled cron in next_run_at and resumes it ("+d.name+")", func() {
			// One worker; metadata_refresh asks the upstream for its models
			// every 2 s, and the sim answers the next such request 8 s late:
			// the only worker is held, usage_rollup's ticks stay queued.
			cfg := filepath.Join(GinkgoT().TempDir(), "proxy.yaml")
			Expect(os.WriteFile(cfg, []byte("scheduler_workers: 1\n"), 0o600)).To(Succeed())
			sim, px, key := schedKeyedWorld(h.ProxyOptions{DatabaseURL: d.url(), Args: []string{"--config", cfg,
				"--job-interval", "metadata_refresh=2s", "--job-interval", "usage_rollup=1s"}})
			a := px.Admin()
			sim.Fault(map[string]any{"path": "/v1/models", "count": 1, "latency_ms": 8000})
			// Operator: next_run_at stays in the past and overdue_secs grows.
			// (Before the stall a queued tick may be due a moment ahead of
			// the clock: overdue_secs is 0 then.)
			var stalledAt, seenAt int64
			Eventually(func() int64 {
				j, date := recurring(a, "usage_rollup")
				if j["next_run_at_unix_secs"] == nil {
					return 0 // nothing queued at this instant: not (yet) a stall
				}
				stalledAt, seenAt = int64(j["next_run_at_unix_secs"].(float64)), date.Unix()
				return int64(j["overdue_secs"].(float64))
			}, 20*time.Second, 250*time.Millisecond).Should(BeNumerically(">=", 3))
			Expect(stalledAt).To(BeNumerically("<", seenAt), "a stalled tick's next_run_at is in the past")
			// Client: the proxy serves meanwhile.
			st, _, b := h.Messages(px.ProxyURL, schedFaultBody, "x-api-key", key)
			Expect(st).To(Equal(200), string(b))
			// The worker is free again: the queued ticks run and next_run_at
			// advances past the stall.
			Eventually(func() bool {
				j, _ := recurring(a, "usage_rollup")
				next, ok := j["next_run_at_unix_secs"].(float64)
				return ok && int64(next) > stalledAt && j["overdue_secs"].(float64) <= 1
			}, 30*time.Second, 250*time.Millisecond).Should(BeTrue())
		})

		It("keeps serving proxy traffic when the scheduler cannot start, with svc_scheduler_init_failure 1 ("+d.name+")", func() {
			// The database already holds a table named like River's job
			// table that is not River's (another application's, or a
			// half-applied migration): River's migration fails.
			db := d.url()
			dir := GinkgoT().TempDir()
			const foreign = "CREATE TABLE river_job (id INTEGER PRIMARY KEY, note TEXT)"
			if db == "" {
				db = "sqlite://" + filepath.Join(dir, "proxy.db")
				c, err := sql.Open("sqlite", strings.TrimPrefix(db, "sqlite://"))
				Expect(err).NotTo(HaveOccurred())
				_, err = c.Exec(foreign)
				Expect(err).NotTo(HaveOccurred())
				Expect(c.Close()).To(Succeed())
			} else {
				h.ExecSQL(db, foreign)
			}
			_, px, key := schedKeyedWorld(h.ProxyOptions{DatabaseURL: db, Dir: dir})
			a := px.Admin()
			// Client: served.
			st, _, b := h.Messages(px.ProxyURL, schedFaultBody, "x-api-key", key)
			Expect(st).To(Equal(200), string(b))
			// Operator: the gauge, the scheduler endpoints and the log.
			Expect(a.Metric("svc_scheduler_init_failure")).To(Equal(1.0))
			a.ExpectError("GET", "/admin/scheduler/status", nil, 503, "scheduler_unavailable")
			a.ExpectError("GET", "/admin/scheduler/failures", nil, 503, "scheduler_unavailable")
			Expect(h.LogEvents(px.Proc, "level", "ERROR")).To(ContainElement(HaveKeyWithValue("msg", ContainSubstring("durable scheduler failed to start"))))
		})
	}
})
