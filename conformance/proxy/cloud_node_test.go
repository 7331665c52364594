package proxy_test

import (
	"encoding/json"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// anthropicNode is testdata/anthropic-node: the Anthropic TypeScript SDK,
// pinned by its package-lock.json, installed from npm's cache when it
// holds it.
var anthropicNode = filepath.Join("testdata", "anthropic-node")

var _ = Describe("Claude through cloud platforms with the Anthropic TypeScript SDK", func() {
	It("creates, streams, calls a tool and counts tokens through Bedrock and through Vertex, unchanged", func() {
		npmInstall(anthropicNode)
		for _, kind := range []string{"bedrock", "vertex"} {
			w := newCloudWorld(kind)
			stdout := runNode(anthropicNode, w.px.ProxyURL, w.key)

			var res struct {
				Create struct {
					Text, Stop string
					Usage      struct {
						In  int `json:"input_tokens"`
						Out int `json:"output_tokens"`
					}
				}
				Stream struct {
					Deltas, Text, Stop string
					Output             int
				}
				Tools struct {
					Stop  string
					Input map[string]any
				}
				Count int
			}
			Expect(json.Unmarshal(stdout, &res)).To(Succeed(), string(stdout))
			Expect(res.Create.Text).To(Equal("hello from typescript"), kind)
			Expect(res.Create.Stop).To(Equal("end_turn"))
			Expect(res.Create.Usage.In).To(Equal(3))
			Expect(res.Create.Usage.Out).To(Equal(3))
			Expect(res.Stream.Deltas).To(Equal("streamed to typescript"), "%s: every text delta arrived", kind)
			Expect(res.Stream.Text).To(Equal("streamed to typescript"))
			Expect(res.Stream.Stop).To(Equal("end_turn"))
			Expect(res.Stream.Output).To(Equal(3))
			Expect(res.Tools.Stop).To(Equal("tool_use"))
			Expect(res.Tools.Input).To(Equal(map[string]any{"text": "call the tool"}))
			Expect(res.Count).To(Equal(4))
			Expect(w.events(4)).To(HaveLen(4))
		}
	})
})
