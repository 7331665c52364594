package replicas_test

import (
	"bufio"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Outages", func() {
	It("keeps serving from the last snapshot while the database is down, and recovers by itself", Label("P-API-3", "P-RUNTIME-2"), func() {
		pg := h.StartPG()
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{DatabaseURL: pg.URL, Args: []string{"--reconcile-interval", "1s"}})
		a := px.Admin()
		a.CreateUpstream("sim", sim.URL, simKey)
		pr := a.CreatePrincipal("app", "*")
		_, key := a.IssueKey(pr)
		Expect(status(px, key)).To(Equal(200))

		pg.Stop()
		for i := 0; i < 20; i++ {
			Expect(status(px, key)).To(Equal(200), "the proxy path must not depend on the database")
		}
		a.ExpectError("GET", "/admin/v1/status", nil, 503, "storage_unavailable")
		a.ExpectError("GET", "/admin/v1/export", nil, 503, "storage_unavailable")
		st, _, _ := a.Do("POST", "/admin/v1/principals/"+pr+"/disable", nil)
		Expect(st).To(Equal(503))

		pg.Start()
		Eventually(func() int { st, _, _ := a.Do("GET", "/admin/v1/status", nil); return st }, 20*time.Second, 100*time.Millisecond).Should(Equal(200))
		// The refused write was not half-applied: the principal is still enabled.
		Expect(a.JSON("GET", "/admin/v1/principals/"+pr, nil, 200)["enabled"]).To(BeTrue())
		a.JSON("POST", "/admin/v1/principals/"+pr+"/disable", nil, 200)
		Expect(status(px, key)).To(Equal(403))
	})

	It("fails only the stream of a replica that dies mid-stream", func() {
		c := newCluster(2)
		a := c.replicas[0].Admin()
		a.CreateUpstream("sim", c.sim.URL, simKey)
		pr := a.CreatePrincipal("app", "*")
		_, key := a.IssueKey(pr)
		for _, r := range c.replicas {
			Eventually(func() int { return status(r, key) }, settle, 10*time.Millisecond).Should(Equal(200))
		}
		slow := `{"model":"claude-x","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"one two three four five"}]}`
		open := func(p *h.Proxy) (*http.Response, *bufio.Reader) {
			req, _ := http.NewRequest("POST", p.ProxyURL+"/v1/messages", strings.NewReader(slow))
			req.Header.Set("x-api-key", key)
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Set("x-sim-fault", "first_event_delay_ms=1500")
			res, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.StatusCode).To(Equal(200))
			rd := bufio.NewReader(res.Body)
			line, err := rd.ReadString('\n')
			Expect(err).NotTo(HaveOccurred())
			Expect(line).To(HavePrefix("event: message_start"))
			return res, rd
		}
		doomed, drd := open(c.replicas[0])
		survivor, srd := open(c.replicas[1])
		c.replicas[0].Kill()
		_, err := readAll(drd)
		Expect(err).To(HaveOccurred(), "the killed replica's stream must end in an error")
		rest, err := readAll(srd)
		Expect(err).NotTo(HaveOccurred())
		Expect(rest).To(ContainSubstring("event: message_stop"))
		doomed.Body.Close()
		survivor.Body.Close()
		Expect(status(c.replicas[1], key)).To(Equal(200))
	})
})

func readAll(rd *bufio.Reader) (string, error) {
	var b strings.Builder
	for {
		line, err := rd.ReadString('\n')
		b.WriteString(line)
		if err != nil {
			if err.Error() == "EOF" {
				return b.String(), nil
			}
			return b.String(), err
		}
	}
}
