package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	h "github.com/pillarhq/pillar/conformance/harness"
)

// OpenAI's official Go SDK as a client of the proxy's Chat Completions
// ingress (docs/openai.md): the issued key as its API key, the proxy's /v1
// as its base URL, nothing else configured.
func openaiClient(w *world, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{option.WithBaseURL(w.px.ProxyURL + "/v1/"), option.WithAPIKey(w.key), option.WithMaxRetries(0)}, opts...)...)
}

// simMessages is what the sim received on /v1/messages, as decoded bodies.
func simMessages(w *world) []map[string]any {
	var out []map[string]any
	for _, r := range w.sim.MessagesWith() {
		var m map[string]any
		Expect(json.Unmarshal([]byte(r.Body), &m)).To(Succeed())
		out = append(out, m)
	}
	return out
}

// requestLog is the principal's recorded requests, newest first, once
// there are n.
func requestLog(w *world, n int) []map[string]any {
	GinkgoHelper()
	return principalLog(w.admin, w.principal, n)
}

// principalLog is principal's request log once it holds n events.
func principalLog(a *h.Admin, principal string, n int) []map[string]any {
	GinkgoHelper()
	var evs []any
	Eventually(func() int {
		evs = a.JSON("GET", "/admin/v1/request-log?principal="+principal, nil, 200)["events"].([]any)
		return len(evs)
	}, 5*time.Second, 50*time.Millisecond).Should(Equal(n))
	out := make([]map[string]any, len(evs))
	for i, e := range evs {
		out[i] = e.(map[string]any)
	}
	return out
}

var _ = Describe("OpenAI Chat Completions ingress", func() {
	ctx := context.Background()

	It("answers the OpenAI SDK's create with the issued key as bearer, translated to Messages and recorded like a Messages request", func() {
		w := newWorld()
		c := openaiClient(w)
		res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "claude-sonnet-4-5",
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.SystemMessage("answer briefly"),
				openai.UserMessage("first question"),
				openai.AssistantMessage("first answer"),
				openai.UserMessage("one two three four five six"),
			},
			MaxCompletionTokens: openai.Int(4),
			Temperature:         openai.Float(0.2),
			Stop:                openai.ChatCompletionNewParamsStopUnion{OfStringArray: []string{"STOP"}},
		})
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Object).To(BeEquivalentTo("chat.completion"))
		Expect(res.Choices).To(HaveLen(1))
		// The sim echoes the last user message, cut at max_tokens.
		Expect(res.Choices[0].Message.Content).To(Equal("one two three four"))
		Expect(res.Choices[0].FinishReason).To(Equal("length"))
		Expect(res.Usage.CompletionTokens).To(BeEquivalentTo(4))
		Expect(res.Usage.PromptTokens).To(BeEquivalentTo(2 + 2 + 2 + 6))
		Expect(res.Usage.TotalTokens).To(Equal(res.Usage.PromptTokens + res.Usage.CompletionTokens))

		sent := simMessages(w)
		Expect(sent).To(HaveLen(1))
		Expect(sent[0]["max_tokens"]).To(BeEquivalentTo(4))
		Expect(sent[0]["temperature"]).To(BeEquivalentTo(0.2))
		Expect(sent[0]["stop_sequences"]).To(Equal([]any{"STOP"}))
		Expect(sent[0]["system"].([]any)[0].(map[string]any)["text"]).To(Equal("answer briefly"))
		Expect(sent[0]["messages"]).To(HaveLen(3))
		rec := w.sim.MessagesWith()[0]
		Expect(rec.Header.Get("Anthropic-Version")).To(Equal("2023-06-01"))
		Expect(rec.Header.Get("Authorization")).To(BeEmpty(), "the client's key never reaches the provider")

		ev := requestLog(w, 1)[0]
		Expect(ev["status"]).To(BeEquivalentTo(200))
		Expect(ev["model"]).To(Equal("claude-sonnet-4-5"))
		Expect(ev["key_id"]).To(Equal(w.keyID))
		Expect(ev["output_tokens"]).To(BeEquivalentTo(4))
		Expect(ev["dialect"]).To(Equal("openai"))
		Expect(w.px.Admin().Metric("svc_proxy_requests_total", "code", "200")).To(BeNumerically(">=", 1))
		// The first series with outcome="ok" is endpoint="chat_completions"
		// (series are ordered by their label values).
		Expect(w.px.Admin().Metric("svc_proxy_openai_requests_total", "outcome", "ok")).To(Equal(1.0))
	})

	It("streams chunks the SDK accumulates, with the usage asked for by stream_options", func() {
		w := newWorld()
		c := openaiClient(w)
		stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
			Model:         "claude-sonnet-4-5",
			Messages:      []openai.ChatCompletionMessageParamUnion{openai.UserMessage("stream these five words")},
			StreamOptions: openai.ChatCompletionStreamOptionsParam{IncludeUsage: openai.Bool(true)},
		})
		acc := openai.ChatCompletionAccumulator{}
		chunks := 0
		for stream.Next() {
			Expect(acc.AddChunk(stream.Current())).To(BeTrue())
			chunks++
		}
		Expect(stream.Err()).NotTo(HaveOccurred())
		Expect(chunks).To(BeNumerically(">", 4), "one chunk per upstream text delta")
		Expect(acc.Choices[0].Message.Content).To(Equal("stream these five words"))
		Expect(acc.Choices[0].FinishReason).To(Equal("stop"))
		Expect(acc.Usage.CompletionTokens).To(BeEquivalentTo(4))
		Expect(acc.Usage.PromptTokens).To(BeEquivalentTo(4))
		ev := requestLog(w, 1)[0]
		Expect(ev["stream"]).To(BeTrue())
		Expect(ev["output_tokens"]).To(BeEquivalentTo(4))
	})

	It("ends a stream the upstream cuts or fails with an error the SDK raises, never a clean end", func() {
		w := newWorld()
		for _, fault := range []string{"drop_after_events=4", "error_after_events=4;error_type=overloaded_error"} {
			c := openaiClient(w, option.WithHeader("x-sim-fault", fault))
			stream := c.Chat.Completions.NewStreaming(ctx, openai.ChatCompletionNewParams{
				Model:    "claude-sonnet-4-5",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("a long enough answer to be cut")},
			})
			text := ""
			for stream.Next() {
				if len(stream.Current().Choices) > 0 {
					text += stream.Current().Choices[0].Delta.Content
				}
			}
			Expect(stream.Err()).To(HaveOccurred(), fault)
			Expect(stream.Err().Error()).To(ContainSubstring("error"))
			Expect(text).NotTo(Equal("a long enough answer to be cut"), fault)
		}
	})

	It("round-trips a tool call: the SDK gets tool_calls (created and streamed) and sends the result back", func() {
		w := newWorld()
		c := openaiClient(w)
		tools := []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
			Name: "lookup", Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"text": map[string]any{"type": "string"}}},
		})}
		convo := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("find the moon")}
		params := openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", Tools: tools, Messages: convo,
			ToolChoice: openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("required")}}
		// The sim calls a forced tool with the echoed words as its input.
		res, err := c.Chat.Completions.New(ctx, params)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Choices[0].FinishReason).To(Equal("tool_calls"))
		Expect(res.Choices[0].Message.ToolCalls).To(HaveLen(1))
		call := res.Choices[0].Message.ToolCalls[0]
		Expect(call.Function.Name).To(Equal("lookup"))
		Expect(call.Function.Arguments).To(MatchJSON(`{"text":"find the moon"}`))
		Expect(call.ID).NotTo(BeEmpty())

		stream := c.Chat.Completions.NewStreaming(ctx, params)
		acc := openai.ChatCompletionAccumulator{}
		var finished []openai.FinishedChatCompletionToolCall
		for stream.Next() {
			Expect(acc.AddChunk(stream.Current())).To(BeTrue())
			if tc, ok := acc.JustFinishedToolCall(); ok {
				finished = append(finished, tc)
			}
		}
		Expect(stream.Err()).NotTo(HaveOccurred())
		Expect(acc.Choices[0].FinishReason).To(Equal("tool_calls"))
		Expect(finished).To(HaveLen(1))
		Expect(finished[0].Name).To(Equal("lookup"))
		Expect(finished[0].Arguments).To(MatchJSON(`{"text":"find the moon"}`), "the two partial JSON parts joined")

		// The result goes back; the sim answers in text (the choice is auto now).
		params.Messages = append(convo, res.Choices[0].Message.ToParam(), openai.ToolMessage("it is in the sky", call.ID))
		params.ToolChoice = openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")}
		res, err = c.Chat.Completions.New(ctx, params)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Choices[0].FinishReason).To(Equal("stop"))
		last := simMessages(w)[2]["messages"].([]any)
		Expect(last).To(HaveLen(3))
		result := last[2].(map[string]any)["content"].([]any)[0].(map[string]any)
		Expect(result).To(HaveKeyWithValue("type", "tool_result"))
		Expect(result).To(HaveKeyWithValue("tool_use_id", call.ID))
	})

	It("translates tool definitions, tool calls and tool results of a round trip", func() {
		w := newWorld()
		c := openaiClient(w)
		params := openai.ChatCompletionNewParams{
			Model: "claude-sonnet-4-5",
			Tools: []openai.ChatCompletionToolUnionParam{openai.ChatCompletionFunctionTool(shared.FunctionDefinitionParam{
				Name: "weather", Description: openai.String("weather of a city"),
				Parameters: shared.FunctionParameters{"type": "object", "properties": map[string]any{"city": map[string]any{"type": "string"}}},
			})},
			ToolChoice:        openai.ChatCompletionToolChoiceOptionUnionParam{OfAuto: openai.String("auto")},
			ParallelToolCalls: openai.Bool(false),
			Messages: []openai.ChatCompletionMessageParamUnion{
				openai.UserMessage("weather in Paris?"),
				{OfAssistant: &openai.ChatCompletionAssistantMessageParam{ToolCalls: []openai.ChatCompletionMessageToolCallUnionParam{{
					OfFunction: &openai.ChatCompletionMessageFunctionToolCallParam{ID: "call_1",
						Function: openai.ChatCompletionMessageFunctionToolCallFunctionParam{Name: "weather", Arguments: `{"city":"Paris"}`}},
				}}}},
				openai.ToolMessage("sunny and warm", "call_1"),
			},
		}
		res, err := c.Chat.Completions.New(ctx, params)
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Choices[0].FinishReason).To(Equal("stop"))
		sent := simMessages(w)[0]
		Expect(sent["tools"]).To(HaveLen(1))
		tool := sent["tools"].([]any)[0].(map[string]any)
		Expect(tool["name"]).To(Equal("weather"))
		Expect(tool["input_schema"].(map[string]any)["type"]).To(Equal("object"))
		Expect(sent["tool_choice"]).To(Equal(map[string]any{"type": "auto", "disable_parallel_tool_use": true}))
		msgs := sent["messages"].([]any)
		Expect(msgs).To(HaveLen(3))
		use := msgs[1].(map[string]any)["content"].([]any)[0].(map[string]any)
		Expect(use).To(HaveKeyWithValue("type", "tool_use"))
		Expect(use).To(HaveKeyWithValue("id", "call_1"))
		Expect(use).To(HaveKeyWithValue("input", map[string]any{"city": "Paris"}))
		result := msgs[2].(map[string]any)["content"].([]any)[0].(map[string]any)
		Expect(result).To(HaveKeyWithValue("type", "tool_result"))
		Expect(result).To(HaveKeyWithValue("tool_use_id", "call_1"))
	})

	It("sends data-URL and https images as Anthropic image sources", func() {
		w := newWorld()
		c := openaiClient(w)
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{
			Model: "claude-sonnet-4-5",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage([]openai.ChatCompletionContentPartUnionParam{
				openai.TextContentPart("what is in these"),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "data:image/png;base64,iVBORw0KGgo="}),
				openai.ImageContentPart(openai.ChatCompletionContentPartImageImageURLParam{URL: "https://images.example/cat.jpg"}),
			})},
		})
		Expect(err).NotTo(HaveOccurred())
		content := simMessages(w)[0]["messages"].([]any)[0].(map[string]any)["content"].([]any)
		Expect(content).To(HaveLen(3))
		Expect(content[1].(map[string]any)["source"]).To(Equal(map[string]any{"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}))
		Expect(content[2].(map[string]any)["source"]).To(Equal(map[string]any{"type": "url", "url": "https://images.example/cat.jpg"}))
	})

	It("refuses what cannot be mapped and maps errors to OpenAI's shape, which the SDK decodes", func() {
		w := newWorld()
		c := openaiClient(w)
		msgs := []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")}
		var apiErr *openai.Error
		_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", Messages: msgs, N: openai.Int(2)})
		Expect(errors.As(err, &apiErr)).To(BeTrue(), "%v", err)
		Expect(apiErr.StatusCode).To(Equal(400))
		Expect(apiErr.Param).To(Equal("n"))
		Expect(apiErr.Code).To(Equal("unsupported_parameter"))
		Expect(apiErr.Type).To(Equal("invalid_request_error"))
		_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", Messages: msgs, Logprobs: openai.Bool(true)})
		Expect(errors.As(err, &apiErr)).To(BeTrue())
		Expect(apiErr.Param).To(Equal("logprobs"))
		Expect(w.sim.MessagesWith()).To(BeEmpty(), "refused requests never reach the provider")

		_, err = c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "gpt-4o", Messages: msgs})
		Expect(errors.As(err, &apiErr)).To(BeTrue())
		Expect(apiErr.StatusCode).To(Equal(403))
		Expect(apiErr.Message).To(ContainSubstring("not allowed"))

		bad := openai.NewClient(option.WithBaseURL(w.px.ProxyURL+"/v1/"), option.WithAPIKey("sk-px-not-issued"), option.WithMaxRetries(0))
		_, err = bad.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", Messages: msgs})
		Expect(errors.As(err, &apiErr)).To(BeTrue())
		Expect(apiErr.StatusCode).To(Equal(401))
		Expect(apiErr.Code).To(Equal("invalid_api_key"))
	})

	It("passes a 429's retry advice, which the SDK honours before it retries", func() {
		w := newWorld()
		// The provider rate-limits the next request once, asking for a
		// one-second wait; the SDK (retries on) waits it out and succeeds.
		w.sim.Fault(map[string]any{"path": "/v1/messages", "count": 1, "status": 429, "retry_after": 1})
		c := openaiClient(w, option.WithMaxRetries(2))
		var resp *http.Response
		began := time.Now()
		res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5",
			Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("after the wait")}}, option.WithResponseInto(&resp))
		Expect(err).NotTo(HaveOccurred())
		Expect(res.Choices[0].Message.Content).To(Equal("after the wait"))
		Expect(w.sim.MessagesWith()).To(HaveLen(2))
		Expect(time.Since(began)).To(BeNumerically(">=", time.Second), "the SDK waited what Retry-After said")

		// A principal's own limit: 429 with Retry-After in OpenAI's shape.
		w.admin.JSON("PATCH", "/admin/v1/principals/"+w.principal, map[string]any{"default_limits": []any{map[string]any{"kind": "requests", "window_secs": 3600, "max": 1}}}, 200)
		c = openaiClient(w)
		var apiErr *openai.Error
		Eventually(func() int {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("x")}})
			if !errors.As(err, &apiErr) {
				return 200
			}
			return apiErr.StatusCode
		}, 5*time.Second, 50*time.Millisecond).Should(Equal(429))
		Expect(apiErr.Code).To(Equal("rate_limit_exceeded"))
		Expect(apiErr.Response.Header.Get("Retry-After")).NotTo(BeEmpty())
		Expect(apiErr.Response.Header.Get("X-Should-Retry")).To(Equal("false"), "an hour's wait is not one to retry into")
	})

	It("prices the SDK's requests into the principal's spend and refuses past its budget with a 429 the SDK decodes", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--reconcile-interval", "1s", "--price-catalog-url", sim.URL + "/catalog/prices.json",
			"--job-interval", "price_catalog_fetch=1s"}})
		w := &world{sim: sim, px: px, admin: px.Admin()}
		w.upstream = w.admin.CreateUpstream("sim", sim.URL, simKey)
		w.principal = w.admin.CreatePrincipal("app", "claude-*")
		w.keyID, w.key = w.admin.IssueKey(w.principal)
		Eventually(func() any {
			return w.admin.JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("v1"))
		c := openaiClient(w)
		ask := func() error {
			_, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5",
				Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage("price this answer")}})
			return err
		}
		Expect(ask()).To(Succeed())
		ev := requestLog(w, 1)[0]
		Expect(ev["dialect"]).To(Equal("openai"))
		Expect(ev["cost_usd"]).NotTo(BeNil(), "priced like a Messages request")
		spent := px.Admin().Metric("svc_proxy_spend_usd_total", "principal", "app")
		Expect(spent).To(BeNumerically(">", 0))

		// A budget of half a request's price: the next request is admitted
		// (nothing spent since the budget was set), the one after refused.
		price, err := strconv.ParseFloat(ev["cost_usd"].(string), 64)
		Expect(err).NotTo(HaveOccurred())
		w.admin.JSON("PATCH", "/admin/v1/principals/"+w.principal, map[string]any{"default_limits": []any{
			map[string]any{"kind": "usd", "window_secs": 86400, "limit": usd(int64(math.Round(price*1e9)) / 2)}}}, 200)
		Expect(ask()).To(Succeed())
		// Its cost is counted against the budget before the spend metric
		// moves: once it moved, the next request meets the spent budget.
		Eventually(func() float64 { return px.Admin().Metric("svc_proxy_spend_usd_total", "principal", "app") },
			5*time.Second, 20*time.Millisecond).Should(BeNumerically(">", spent))
		var apiErr *openai.Error
		Expect(errors.As(ask(), &apiErr)).To(BeTrue())
		Expect(apiErr.StatusCode).To(Equal(429))
		Expect(apiErr.Code).To(Equal("rate_limit_exceeded"))
		Expect(apiErr.Message).To(ContainSubstring("budget"))
		Expect(apiErr.Response.Header.Get("X-Should-Retry")).To(Equal("false"))
		Expect(px.Admin().Metric("svc_proxy_principal_limited_total", "kind", "usd")).To(BeEquivalentTo(1))
		refused := requestLog(w, 3)[0]
		Expect(refused["status"]).To(BeEquivalentTo(429))
		Expect(refused["dialect"]).To(Equal("openai"))
	})

	It("gets cache reads on every later turn of a conversation, by the sim's cache accounting", func() {
		w := newWorld()
		c := openaiClient(w)
		convo := []openai.ChatCompletionMessageParamUnion{openai.SystemMessage("you are a careful assistant who answers in full sentences")}
		var cached []int64
		for _, q := range []string{"tell me about the first topic please", "and now the second topic please", "finally the third topic please"} {
			convo = append(convo, openai.UserMessage(q))
			res, err := c.Chat.Completions.New(ctx, openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", Messages: convo})
			Expect(err).NotTo(HaveOccurred())
			cached = append(cached, res.Usage.PromptTokensDetails.CachedTokens)
			convo = append(convo, openai.AssistantMessage(res.Choices[0].Message.Content))
		}
		// Turn 1 writes; turn 2 reads the system prompt and question 1
		// (10 + 7 words); turn 3 reads through question 2 (17 + 7 + 6).
		Expect(cached).To(Equal([]int64{0, 17, 30}))
	})

	It("lists only the principal's models in OpenAI's shape when asked without anthropic-version", func() {
		w := newWorld("claude-sonnet-*")
		c := openaiClient(w)
		page, err := c.Models.List(ctx)
		Expect(err).NotTo(HaveOccurred())
		Expect(page.Data).NotTo(BeEmpty())
		for _, m := range page.Data {
			Expect(m.ID).To(HavePrefix("claude-sonnet-"))
			Expect(m.OwnedBy).To(Equal("anthropic"))
			Expect(string(m.Object)).To(Equal("model"))
		}
		// An Anthropic client on the same path keeps Anthropic's shape.
		req, _ := http.NewRequest("GET", w.px.ProxyURL+"/v1/models", nil)
		req.Header.Set("x-api-key", w.key)
		req.Header.Set("anthropic-version", "2023-06-01")
		res, err := http.DefaultClient.Do(req)
		Expect(err).NotTo(HaveOccurred())
		var list map[string]any
		Expect(json.NewDecoder(res.Body).Decode(&list)).To(Succeed())
		res.Body.Close()
		Expect(list).To(HaveKey("has_more"))
		Expect(strings.Join(modelIDs(list), ",")).NotTo(ContainSubstring("haiku"))
	})
})

func modelIDs(list map[string]any) []string {
	var ids []string
	for _, m := range list["data"].([]any) {
		ids = append(ids, m.(map[string]any)["id"].(string))
	}
	return ids
}
