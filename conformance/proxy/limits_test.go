package proxy_test

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Principal default_limits", func() {
	It("refuses a principal past its token budget with a 429 the SDK understands, and lifts it at runtime", func() {
		w := newWorld()
		limited := []any{map[string]any{"kind": "tokens", "window_secs": 3600, "max": 10}}
		w.admin.JSON("PATCH", "/admin/v1/principals/"+w.principal, map[string]any{"default_limits": limited}, 200)
		c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0))
		params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two three four five six"))}}
		// The sim counts the prompt's words and the answer's: the first
		// request spends more than 10 tokens, so once its usage is counted
		// (right after it finished) the next one is refused.
		msg, err := c.Messages.New(context.Background(), params)
		Expect(err).NotTo(HaveOccurred())
		Expect(msg.Usage.InputTokens + msg.Usage.OutputTokens).To(BeNumerically(">", 10))
		var apiErr *anthropic.Error
		Eventually(func() int {
			_, err := c.Messages.New(context.Background(), params)
			if !errors.As(err, &apiErr) {
				return 200
			}
			return apiErr.StatusCode
		}, 5*time.Second, 50*time.Millisecond).Should(Equal(429))
		Expect(apiErr.Response.Header.Get("Retry-After")).NotTo(BeEmpty())
		Expect(apiErr.RawJSON()).To(ContainSubstring("rate_limit_error"))
		Expect(apiErr.RawJSON()).To(ContainSubstring("10 tokens per 3600s"))
		Expect(w.px.Admin().Metric("svc_proxy_principal_limited_total", "kind", "tokens")).To(BeNumerically(">=", 1))

		// Limits change with the snapshot, like everything else.
		w.admin.JSON("PATCH", "/admin/v1/principals/"+w.principal, map[string]any{"default_limits": []any{}}, 200)
		Eventually(func() error { _, err := c.Messages.New(context.Background(), params); return err }, 5*time.Second, 50*time.Millisecond).Should(Succeed())
	})

	It("sends the principal's own anthropic-ratelimit-* headers, which the SDK reads, on success, on a stream and on the 429", func() {
		w := newWorld()
		limited := []any{map[string]any{"kind": "requests", "window_secs": 3600, "max": 2}, map[string]any{"kind": "tokens", "window_secs": 3600, "max": 100000}}
		w.admin.JSON("PATCH", "/admin/v1/principals/"+w.principal, map[string]any{"default_limits": limited}, 200)
		c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0))
		params := anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 8,
			Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("one two three"))}}
		var resp *http.Response
		_, err := c.Messages.New(context.Background(), params, option.WithResponseInto(&resp))
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Header.Get("anthropic-ratelimit-requests-limit")).To(Equal("2"))
		Expect(resp.Header.Get("anthropic-ratelimit-requests-remaining")).To(Equal("1"))
		reset, err := time.Parse(time.RFC3339, resp.Header.Get("anthropic-ratelimit-requests-reset"))
		Expect(err).NotTo(HaveOccurred(), "reset is RFC 3339")
		Expect(reset).To(BeTemporally(">", time.Now()))
		Expect(reset).To(BeTemporally("<=", time.Now().Add(2*time.Hour+time.Second)))
		Expect(resp.Header.Get("anthropic-ratelimit-tokens-limit")).To(Equal("100000"))
		tokensLeft, err := strconv.Atoi(resp.Header.Get("anthropic-ratelimit-tokens-remaining"))
		Expect(err).NotTo(HaveOccurred())
		Expect(tokensLeft).To(BeNumerically("<=", 100000))

		// A stream carries them too, in its 200 headers: the second of two.
		st, hdr, b := h.Messages(w.px.ProxyURL, streamBody, "x-api-key", w.key)
		Expect(st).To(Equal(200), string(b))
		Expect(hdr.Get("Content-Type")).To(HavePrefix("text/event-stream"))
		Expect(string(b)).To(ContainSubstring("event: message_stop"))
		Expect(hdr.Get("anthropic-ratelimit-requests-limit")).To(Equal("2"))
		Expect(hdr.Get("anthropic-ratelimit-requests-remaining")).To(Equal("0"))
		streamReset, err := time.Parse(time.RFC3339, hdr.Get("anthropic-ratelimit-requests-reset"))
		Expect(err).NotTo(HaveOccurred(), "reset is RFC 3339")
		Expect(streamReset).To(BeTemporally(">", time.Now()))
		Expect(streamReset).To(BeTemporally("<=", time.Now().Add(2*time.Hour+time.Second)))
		Expect(hdr.Get("anthropic-ratelimit-tokens-limit")).To(Equal("100000"))
		streamTokensLeft, err := strconv.Atoi(hdr.Get("anthropic-ratelimit-tokens-remaining"))
		Expect(err).NotTo(HaveOccurred())
		Expect(streamTokensLeft).To(BeNumerically("<=", 100000))
		var apiErr *anthropic.Error
		_, err = c.Messages.New(context.Background(), params)
		Expect(errors.As(err, &apiErr)).To(BeTrue(), "third request in the hour: %v", err)
		Expect(apiErr.StatusCode).To(Equal(429))
		Expect(apiErr.Response.Header.Get("anthropic-ratelimit-requests-limit")).To(Equal("2"))
		Expect(apiErr.Response.Header.Get("anthropic-ratelimit-requests-remaining")).To(Equal("0"))
		_, err = time.Parse(time.RFC3339, apiErr.Response.Header.Get("anthropic-ratelimit-requests-reset"))
		Expect(err).NotTo(HaveOccurred())
	})
})
