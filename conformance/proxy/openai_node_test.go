package proxy_test

import (
	"encoding/json"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// nodeClient is testdata/openai-node: the openai npm package, pinned by its
// package-lock.json, installed from npm's cache when it holds it.
var nodeClient = filepath.Join("testdata", "openai-node")

var _ = Describe("OpenAI Chat Completions ingress with the openai npm package", func() {
	It("creates, streams, round-trips tools and raises on refusals and cut streams", func() {
		npmInstall(nodeClient)
		w := newWorld()
		stdout := runNode(nodeClient, w.px.ProxyURL, w.key)

		var res struct {
			Create struct {
				Content, Finish string
				Usage           struct {
					PromptTokens     int `json:"prompt_tokens"`
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			Stream struct {
				Content, Finish string
				Usage           *struct {
					CompletionTokens int `json:"completion_tokens"`
				}
			}
			Tools   struct{ Finish string }
			Refused *struct {
				Status            int
				Param, Code, Type string
			}
			Cut struct {
				Raised  bool
				Message string
			}
		}
		Expect(json.Unmarshal(stdout, &res)).To(Succeed(), string(stdout))
		Expect(res.Create.Content).To(Equal("hello from node"))
		Expect(res.Create.Finish).To(Equal("stop"))
		Expect(res.Create.Usage.PromptTokens).To(Equal(5))
		Expect(res.Create.Usage.CompletionTokens).To(Equal(3))
		Expect(res.Stream.Content).To(Equal("streamed from node"))
		Expect(res.Stream.Finish).To(Equal("stop"))
		Expect(res.Stream.Usage).NotTo(BeNil(), "include_usage asked for the usage chunk")
		Expect(res.Stream.Usage.CompletionTokens).To(Equal(3))
		Expect(res.Tools.Finish).To(Equal("stop"))
		Expect(res.Refused).NotTo(BeNil())
		Expect(*res.Refused).To(Equal(struct {
			Status            int
			Param, Code, Type string
		}{400, "n", "unsupported_parameter", "invalid_request_error"}))
		Expect(res.Cut.Raised).To(BeTrue(), "a cut stream must raise, not end cleanly")

		sent := simMessages(w)
		Expect(sent).To(HaveLen(4), "create, stream, tools and the cut stream reached the provider; the refusal did not")
		use := sent[2]["messages"].([]any)[1].(map[string]any)["content"].([]any)[0].(map[string]any)
		Expect(use).To(HaveKeyWithValue("input", map[string]any{"city": "Oslo"}))
	})
})
