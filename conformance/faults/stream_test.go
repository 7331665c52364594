package faults_test

// Faults on the proxy path (issue 18, items 1, 2 and 5): an upstream that
// cuts a stream, hangs before its headers or in the middle of a stream, or
// refuses an OAuth token. See docs/resilience.md, "Proxy path".

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

const streamSimKey = "sk-sim-faults-upstream"

const streamReq = `{"model":"claude-sonnet-4-5","max_tokens":16,"stream":true,"messages":[{"role":"user","content":"one two three four five six"}]}`

// streamWorld is a proxy with short upstream deadlines in front of two
// sims, each behind an API-key upstream ("first" is tried first).
type streamWorld struct {
	first, second     *h.Sim
	px                *h.Proxy
	admin             *h.Admin
	firstID, secondID string
	key               string
}

// proxyDeadlines are short so specs end fast; the defaults are minutes.
var proxyDeadlines = []string{"--upstream-header-timeout", "1s", "--upstream-idle-timeout", "1s"}

func newStreamWorld(d driver) *streamWorld {
	w := &streamWorld{first: h.StartSim(streamSimKey), second: h.StartSim(streamSimKey)}
	w.px = h.StartProxy(h.ProxyOptions{DatabaseURL: d.url(), Args: proxyDeadlines})
	w.admin = w.px.Admin()
	w.firstID = w.admin.CreateUpstream("first", w.first.URL, streamSimKey)
	w.secondID = w.admin.CreateStandbyUpstream("second", w.second.URL, streamSimKey)
	_, w.key = w.admin.IssueKey(w.admin.CreatePrincipal("app", "claude-*"))
	waitApplied(w.admin)
	return w
}

// waitApplied waits until the proxy's snapshot carries the latest change.
func waitApplied(a *h.Admin) {
	Eventually(func() bool {
		s := a.JSON("GET", "/admin/v1/status", nil, 200)
		return s["snapshot"].(map[string]any)["generation"] == s["config_generation"]
	}, 10*time.Second, 50*time.Millisecond).Should(BeTrue())
}

// streamOnce posts a streaming request and reads the answer to its end:
// what the client received and how the transfer ended (nil: cleanly).
func streamOnce(proxyURL, key string) (int, string, error) {
	req, err := http.NewRequest("POST", proxyURL+"/v1/messages", strings.NewReader(streamReq))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("x-api-key", key)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := http.DefaultClient.Do(req.WithContext(ctx))
	Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	b, rerr := io.ReadAll(res.Body)
	return res.StatusCode, string(b), rerr
}

// expectStreamError checks the client saw Anthropic's mid-stream error
// event and then a cut transfer, never a clean end.
func expectStreamError(body string, rerr error) {
	GinkgoHelper()
	i := strings.Index(body, "event: error\ndata: ")
	Expect(i).To(BeNumerically(">=", 0), "no error event in %q", body)
	line, _, _ := strings.Cut(body[i+len("event: error\ndata: "):], "\n")
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	Expect(json.Unmarshal([]byte(line), &e)).To(Succeed(), line)
	Expect(e.Type).To(Equal("error"))
	Expect(e.Error.Type).To(BeElementOf("api_error", "overloaded_error"))
	Expect(e.Error.Message).NotTo(BeEmpty())
	Expect(body).NotTo(ContainSubstring("message_stop"))
	Expect(rerr).To(HaveOccurred(), "the transfer ended cleanly after the error event")
}

// requestEvents waits until n request events are stored and returns them.
func requestEvents(a *h.Admin, n int) []map[string]any {
	GinkgoHelper()
	var evs []map[string]any
	Eventually(func(g Gomega) int {
		st, _, b := a.Do("GET", "/admin/v1/request-events?limit=100", nil)
		g.Expect(st).To(Equal(200), string(b))
		evs = nil
		g.Expect(json.Unmarshal(b, &evs)).To(Succeed())
		return len(evs)
	}, 10*time.Second, 100*time.Millisecond).Should(Equal(n))
	return evs
}

var _ = Describe("Upstream faults on the proxy path", func() {
	for _, d := range drivers {
		Context(d.name, func() {
			It("ends a stream the upstream cuts with Anthropic's error event and a closed connection", func() {
				w := newStreamWorld(d)
				w.first.Fault(map[string]any{"path": "/v1/messages", "count": 2, "drop_after_events": 2})

				st, body, rerr := streamOnce(w.px.ProxyURL, w.key)
				Expect(st).To(Equal(200))
				Expect(body).To(HavePrefix("event: message_start"))
				expectStreamError(body, rerr)

				// The official SDK raises instead of returning a cut answer.
				c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0))
				stream := c.Messages.NewStreaming(context.Background(), anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 16,
					Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two three"))}})
				events := 0
				for stream.Next() {
					events++
				}
				Expect(stream.Err()).To(HaveOccurred())
				Expect(events).To(BeNumerically(">=", 1))

				// The operator sees both as interrupted streams.
				for _, ev := range requestEvents(w.admin, 2) {
					Expect(ev).To(HaveKeyWithValue("error_type", "stream_interrupted"))
					Expect(ev).To(HaveKeyWithValue("upstream_id", w.firstID))
					Expect(ev).To(HaveKeyWithValue("stream", true))
				}
				Expect(w.admin.Metric("svc_proxy_upstream_interrupted_total")).To(Equal(2.0))
			})

			It("records a stream the upstream ends with its own error event with that error type, counted as an upstream error", func() {
				w := newStreamWorld(d)
				w.first.Fault(map[string]any{"path": "/v1/messages", "count": 1, "error_after_events": 2, "error_type": "overloaded_error"})

				st, body, rerr := streamOnce(w.px.ProxyURL, w.key)
				Expect(st).To(Equal(200))
				// Passed on as the upstream sent it: its error event, then
				// the end the upstream chose.
				Expect(rerr).NotTo(HaveOccurred())
				Expect(body).To(HavePrefix("event: message_start"))
				Expect(body).To(ContainSubstring("event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\""))
				Expect(strings.Count(body, "event: error")).To(Equal(1))

				ev := requestEvents(w.admin, 1)[0]
				Expect(ev).To(HaveKeyWithValue("error_type", "overloaded_error"))
				Expect(ev).To(HaveKeyWithValue("status", 200.0))
				Expect(ev).To(HaveKeyWithValue("upstream_id", w.firstID))
				Expect(w.admin.Metric("svc_proxy_upstream_errors_total", "upstream", "first", "class", "529")).To(Equal(1.0))
				Expect(w.admin.Metric("svc_proxy_upstream_interrupted_total")).To(Equal(0.0))
			})

			It("fails over to the next upstream when the first sends no headers within the header timeout", func() {
				w := newStreamWorld(d)
				w.first.Fault(map[string]any{"path": "/v1/messages", "count": 1, "latency_ms": 60000})

				st, body, rerr := streamOnce(w.px.ProxyURL, w.key)
				Expect(st).To(Equal(200))
				Expect(rerr).NotTo(HaveOccurred())
				Expect(body).To(ContainSubstring("event: message_stop"))
				Expect(body).NotTo(ContainSubstring("event: error"))

				ev := requestEvents(w.admin, 1)[0]
				Expect(ev).To(HaveKeyWithValue("upstream_id", w.secondID))
				Expect(ev).To(HaveKeyWithValue("status", 200.0))
				Expect(ev["error_type"] == nil || ev["error_type"] == "").To(BeTrue(), "error_type %v", ev["error_type"])
				Expect(w.admin.Metric("svc_proxy_upstream_timeouts_total", "phase", "headers")).To(Equal(1.0))
				Expect(w.admin.Metric("svc_proxy_upstream_failovers_total")).To(Equal(1.0))
			})

			It("ends a stream that goes silent past the idle deadline with an error event", func() {
				w := newStreamWorld(d)
				// message_start, then nothing for a minute.
				w.first.Fault(map[string]any{"path": "/v1/messages", "count": 1, "first_event_delay_ms": 60000})

				st, body, rerr := streamOnce(w.px.ProxyURL, w.key)
				Expect(st).To(Equal(200))
				Expect(body).To(HavePrefix("event: message_start"))
				expectStreamError(body, rerr)
				Expect(body).To(ContainSubstring("idle deadline"))

				ev := requestEvents(w.admin, 1)[0]
				Expect(ev).To(HaveKeyWithValue("error_type", "stream_interrupted"))
				Expect(ev).To(HaveKeyWithValue("upstream_id", w.firstID))
				Expect(w.admin.Metric("svc_proxy_upstream_timeouts_total", "phase", "idle")).To(Equal(1.0))
			})

			// Passes once the integrator wires the OAuth service's
			// RefreshToken into relay.Options.Refresher.
			It("fails over when an OAuth upstream refuses its token, and refreshes the token", func() {
				sub, paid := h.StartSim(streamSimKey), h.StartSim(streamSimKey)
				px := h.StartProxy(h.ProxyOptions{DatabaseURL: d.url(), Args: proxyDeadlines})
				admin := px.Admin()
				oauthID := admin.CreateOAuthUpstream("subscription", sub)
				admin.ConnectOAuth(oauthID, "acct-faults")
				paidID := admin.CreateUpstream("paid", paid.URL, streamSimKey)
				_, key := admin.IssueKey(admin.CreatePrincipal("app", "claude-*"))
				waitApplied(admin)
				tokenCalls := func() int {
					n := 0
					for _, r := range sub.Requests() {
						if r.Path == "/v1/oauth/token" {
							n++
						}
					}
					return n
				}
				before := tokenCalls()
				// The subscription refuses every Messages request (a
				// warm-up taking one use must not hide the fault).
				sub.Fault(map[string]any{"path": "/v1/messages", "status": 401})

				st, _, b := h.Messages(px.ProxyURL, `{"model":"claude-sonnet-4-5","max_tokens":16,"messages":[{"role":"user","content":"hi"}]}`, "x-api-key", key)
				Expect(st).To(Equal(200), string(b))

				ev := requestEvents(admin, 1)[0]
				Expect(ev).To(HaveKeyWithValue("upstream_id", paidID))
				Expect(admin.Metric("svc_proxy_upstream_failovers_total")).To(Equal(1.0))
				// The relay asked for a lazy refresh, and it reached the
				// provider's token endpoint.
				Expect(admin.Metric("svc_proxy_lazy_refresh_started_total")).To(Equal(1.0))
				Eventually(tokenCalls, 10*time.Second, 100*time.Millisecond).Should(BeNumerically(">", before),
					fmt.Sprintf("no refresh grant reached the token endpoint of %s", oauthID))
			})
		})
	}
})
