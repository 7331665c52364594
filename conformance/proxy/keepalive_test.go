package proxy_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// A conversation whose system prompt and document are cached (5 minutes).
func cachedConversation(topic string) string {
	return `{"model":"claude-sonnet-4-5","max_tokens":64,"system":[{"type":"text","text":"You answer questions about ` + topic + ` tersely.","cache_control":{"type":"ephemeral"}}],
"messages":[{"role":"user","content":[{"type":"text","text":"A long shared document about ` + topic + ` with many many words in it","cache_control":{"type":"ephemeral"}},{"type":"text","text":"first question"}]}]}`
}

func nextTurn(first string) string {
	return strings.Replace(first, `{"type":"text","text":"first question"}]}]}`,
		`{"type":"text","text":"first question"}]},{"role":"assistant","content":"first answer"},{"role":"user","content":"second question"}]}`, 1)
}

type usageBody struct {
	Usage struct {
		CacheRead     int `json:"cache_read_input_tokens"`
		CacheCreation int `json:"cache_creation_input_tokens"`
	} `json:"usage"`
}

func advanceSim(sim *h.Sim, secs float64) {
	b, _ := json.Marshal(map[string]any{"advance_secs": secs})
	res, err := http.Post(sim.URL+"/_sim/clock", "application/json", bytes.NewReader(b))
	Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	Expect(res.StatusCode).To(Equal(200))
}

var _ = Describe("Prompt-cache keep-alive", func() {
	It("keeps an idle conversation's cache warm with keep-alive; without it the cache expires", Label("P-KA-2", "P-PR-5"), func() {
		w := newWorld()
		// A second principal with keep-alive: leads as long as allowed, so the
		// first refresh comes one minute after the turn.
		kept := w.admin.JSON("POST", "/admin/v1/principals", map[string]any{"name": "kept", "kind": "machine", "allowed_models": []string{"claude-*"},
			"cache_keepalive": map[string]any{"enabled": true, "refresh_lead_time_5m_secs": 240, "max_refreshes_per_session": 2}}, 201)["id"].(string)
		_, keptKey := w.admin.IssueKey(kept)

		convKept, convPlain := cachedConversation("rivers"), cachedConversation("mountains")
		for _, c := range []struct{ body, key string }{{convKept, keptKey}, {convPlain, w.key}} {
			st, _, b := h.Messages(w.px.ProxyURL, c.body, "x-api-key", c.key)
			Expect(st).To(Equal(200), string(b))
			var u usageBody
			json.Unmarshal(b, &u)
			Expect(u.Usage.CacheCreation).To(BeNumerically(">", 0), "the turn wrote the cache")
		}
		// The refresh replays the cached prefix with max_tokens 1.
		refreshes := func() []h.Recorded {
			return w.sim.MessagesWith(`"max_tokens":1`, "rivers")
		}
		Eventually(refreshes, 90*time.Second, time.Second).Should(HaveLen(1))
		r := refreshes()[0]
		Expect(r.Body).NotTo(ContainSubstring("first question"), "the refresh carries only the cached prefix")
		Expect(r.Header.Get("X-Api-Key")).To(Equal(simKey))
		Eventually(func() float64 { return w.px.Admin().Metric("svc_keepalive_refresh_total", "outcome", "refreshed") }, 10*time.Second).Should(Equal(1.0))

		// Both conversations now sit idle for longer than the TTL since their
		// turn (on the sim's clock): the refreshed one is still cached.
		advanceSim(w.sim, 4*60+30)
		var kept2, plain2 usageBody
		_, _, b := h.Messages(w.px.ProxyURL, nextTurn(convKept), "x-api-key", keptKey)
		json.Unmarshal(b, &kept2)
		_, _, b = h.Messages(w.px.ProxyURL, nextTurn(convPlain), "x-api-key", w.key)
		json.Unmarshal(b, &plain2)
		Expect(kept2.Usage.CacheRead).To(BeNumerically(">", 0), "keep-alive kept the cache")
		Expect(plain2.Usage.CacheRead).To(Equal(0), "without keep-alive the cache expired")
		Expect(w.px.RawOutput()).NotTo(ContainSubstring("A long shared document"), "prompts are never logged")
	})
})
