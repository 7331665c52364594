package proxy_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
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
		for _, tool := range []string{"node", "npm"} {
			_, err := exec.LookPath(tool)
			Expect(err).NotTo(HaveOccurred(), "%s is needed for the TypeScript SDK", tool)
		}
		install := exec.Command("npm", "ci", "--prefer-offline", "--no-audit", "--no-fund")
		install.Dir = anthropicNode
		out, err := install.CombinedOutput()
		Expect(err).NotTo(HaveOccurred(), "npm ci: %s", out)

		for _, kind := range []string{"bedrock", "vertex"} {
			w := newCloudWorld(kind)
			run := exec.Command("node", "client.mjs")
			run.Dir = anthropicNode
			run.Env = append(run.Environ(), "PROXY_URL="+w.px.ProxyURL, "PROXY_KEY="+w.key)
			var stderr bytes.Buffer
			run.Stderr = &stderr
			stdout, err := run.Output()
			Expect(err).NotTo(HaveOccurred(), "%s: node client.mjs: %s", kind, stderr.String())

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
