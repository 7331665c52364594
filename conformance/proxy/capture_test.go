package proxy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// wire keeps the bytes an SDK client sent and received, as they crossed
// the connection.
type wire struct {
	mu        sync.Mutex
	sent, got [][]byte
}

func (wr *wire) middleware(req *http.Request, next option.MiddlewareNext) (*http.Response, error) {
	var body []byte
	if req.GetBody != nil {
		rc, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		body, _ = io.ReadAll(rc)
	}
	resp, err := next(req)
	if err != nil {
		return resp, err
	}
	got := &bytes.Buffer{}
	wr.mu.Lock()
	wr.sent = append(wr.sent, body)
	i := len(wr.got)
	wr.got = append(wr.got, nil)
	wr.mu.Unlock()
	resp.Body = &teeBody{ReadCloser: resp.Body, buf: got, done: func() {
		wr.mu.Lock()
		wr.got[i] = got.Bytes()
		wr.mu.Unlock()
	}}
	return resp, nil
}

type teeBody struct {
	io.ReadCloser
	buf  *bytes.Buffer
	done func()
	once sync.Once
}

func (t *teeBody) Read(p []byte) (int, error) {
	n, err := t.ReadCloser.Read(p)
	t.buf.Write(p[:n])
	return n, err
}

func (t *teeBody) Close() error {
	t.once.Do(t.done)
	return t.ReadCloser.Close()
}

var _ = Describe("Captured exchanges", func() {
	It("captures an opted-in principal's exchanges, sealed at rest, readable by an auditor and not by a viewer; others have none", func() {
		w := newWorld()
		on := w.admin.JSON("PATCH", "/admin/v1/principals/"+w.principal, map[string]any{"capture_exchanges": true}, 200)
		Expect(on["capture_exchanges"]).To(BeTrue())
		const prompt = "capture-conformance-prompt-93c1"

		wr := &wire{}
		c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0), option.WithMiddleware(wr.middleware))
		params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt + " one"))}}
		msg, err := c.Messages.New(context.Background(), params)
		Expect(err).NotTo(HaveOccurred())
		Expect(msg.Content).NotTo(BeEmpty())
		params.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(prompt + " two"))}
		stream := c.Messages.NewStreaming(context.Background(), params)
		var acc anthropic.Message
		for stream.Next() {
			Expect(acc.Accumulate(stream.Current())).To(Succeed())
		}
		Expect(stream.Err()).NotTo(HaveOccurred())
		Expect(stream.Close()).To(Succeed())
		Expect(acc.StopReason).NotTo(BeEmpty())
		// OpenAI's dialect is captured as its client sent and got it.
		chatBody := `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"` + prompt + ` three"}]}`
		req, err := http.NewRequest("POST", w.px.ProxyURL+"/v1/chat/completions", strings.NewReader(chatBody))
		Expect(err).NotTo(HaveOccurred())
		req.Header.Set("Authorization", "Bearer "+w.key)
		req.Header.Set("Content-Type", "application/json")
		res, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		chatAnswer, err := io.ReadAll(res.Body)
		res.Body.Close()
		Expect(err).NotTo(HaveOccurred())
		Expect(res.StatusCode).To(Equal(200), string(chatAnswer))

		// The three events are marked captured once the sink has written them.
		var evs []map[string]any
		Eventually(func() int {
			evs = nil
			for _, e := range w.admin.JSON("GET", "/admin/v1/request-log?principal="+w.principal, nil, 200)["events"].([]any) {
				if ev := e.(map[string]any); ev["captured"] == true {
					evs = append(evs, ev)
				}
			}
			return len(evs)
		}, 20*time.Second, 100*time.Millisecond).Should(Equal(3))

		// An auditor reads each exchange: the bytes the client sent and got.
		auditor := &h.Admin{Base: w.px.AdminURL, Token: w.admin.JSON("POST", "/admin/v1/admin-tokens",
			map[string]any{"name": "aud", "role": "auditor", "expires_in_secs": 3600}, 201)["token"].(string)}
		wr.mu.Lock()
		sent, got := wr.sent, wr.got
		wr.mu.Unlock()
		Expect(sent).To(HaveLen(2))
		for _, ev := range evs {
			x := auditor.JSON("GET", "/admin/v1/request-events/"+ev["id"].(string)+"/exchange", nil, 200)
			Expect(x["event_id"]).To(Equal(ev["id"]))
			Expect(x["principal_id"]).To(Equal(w.principal))
			Expect(x["truncated"]).To(BeFalse())
			if ev["dialect"] == "openai" {
				Expect(x["request"]).To(Equal(chatBody))
				Expect(x["response"]).To(Equal(string(chatAnswer)))
				Expect(x["response"]).To(ContainSubstring(`"object":"chat.completion"`))
				continue
			}
			i := 0 // the SDK's requests: sent[0] plain, sent[1] streamed
			if ev["stream"] == false {
				Expect(x["request"]).To(ContainSubstring(prompt + " one"))
			} else {
				i = 1
				Expect(x["request"]).To(ContainSubstring(prompt + " two"))
				Expect(x["response"]).To(HavePrefix("event: message_start\n"))
				Expect(x["response"]).To(ContainSubstring("event: message_stop"))
			}
			Expect(x["request"]).To(Equal(string(sent[i])), "the request body as the SDK sent it")
			Expect(x["response"]).To(Equal(string(got[i])), "the response bytes as the SDK received them")
		}
		var nonStream map[string]any
		for _, ev := range evs {
			if ev["stream"] == false && ev["dialect"] != "openai" {
				nonStream = auditor.JSON("GET", "/admin/v1/request-events/"+ev["id"].(string)+"/exchange", nil, 200)
			}
		}
		var answer map[string]any
		Expect(json.Unmarshal([]byte(nonStream["response"].(string)), &answer)).To(Succeed())
		Expect(answer["id"]).To(Equal(msg.ID))

		// Each read is audited, as the auditor's.
		audit := w.admin.JSON("GET", "/admin/v1/audit?resource_kind=captured_exchange", nil, 200)["entries"].([]any)
		Expect(len(audit)).To(BeNumerically(">=", 4))

		// A viewer may see the log but not the bodies.
		viewer := &h.Admin{Base: w.px.AdminURL, Token: w.admin.JSON("POST", "/admin/v1/admin-tokens",
			map[string]any{"name": "vic", "role": "viewer", "expires_in_secs": 3600}, 201)["token"].(string)}
		viewer.ExpectError("GET", "/admin/v1/request-events/"+evs[0]["id"].(string)+"/exchange", nil, 403, "forbidden")
		Expect(viewer.JSON("GET", "/admin/v1/request-log", nil, 200)["events"]).NotTo(BeEmpty())

		// A principal without capture: its request has no exchange.
		other := w.admin.CreatePrincipal("plain", "claude-*")
		Expect(w.admin.JSON("GET", "/admin/v1/principals/"+other, nil, 200)["capture_exchanges"]).To(BeFalse())
		_, otherKey := w.admin.IssueKey(other)
		st, _, _ := h.Messages(w.px.ProxyURL, `{"model":"claude-sonnet-4-5","max_tokens":8,"messages":[{"role":"user","content":"`+prompt+` plain"}]}`, "x-api-key", otherKey)
		Expect(st).To(Equal(200))
		var plainID string
		Eventually(func(g Gomega) int {
			es := w.admin.JSON("GET", "/admin/v1/request-log?principal="+other, nil, 200)["events"].([]any)
			if len(es) == 1 {
				plainID = es[0].(map[string]any)["id"].(string)
				g.Expect(es[0].(map[string]any)["captured"]).To(BeFalse())
			}
			return len(es)
		}, 20*time.Second, 100*time.Millisecond).Should(Equal(1))
		auditor.ExpectError("GET", "/admin/v1/request-events/"+plainID+"/exchange", nil, 404, "exchange_not_captured")

		// At rest, the prompt is nowhere in clear: not in the database file,
		// its write-ahead log or its shared memory.
		files, err := filepath.Glob(filepath.Join(w.px.Opts.Dir, "proxy.db*"))
		Expect(err).NotTo(HaveOccurred())
		Expect(files).To(ContainElement(HaveSuffix("proxy.db-wal")))
		for _, f := range files {
			raw, err := os.ReadFile(f)
			Expect(err).NotTo(HaveOccurred())
			Expect(strings.Contains(string(raw), prompt)).To(BeFalse(), "%s holds the prompt in clear", filepath.Base(f))
		}
	})
})
