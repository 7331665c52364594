package proxy_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anthropics/anthropic-sdk-go"
	"github.com/anthropics/anthropic-sdk-go/option"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/openai/openai-go/v3"
	option2 "github.com/openai/openai-go/v3/option"

	h "github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/sim/provider"
)

const (
	bedrockModelID = "anthropic.claude-sonnet-4-5-20250929-v1:0"
	vertexModelID  = "claude-sonnet-4-5@20250929"
)

// cloudWorld is one proxy in front of one sim, reached as a Bedrock or a
// Vertex upstream, with the price catalog of the sim installed.
type cloudWorld struct {
	sim       *h.Sim
	px        *h.Proxy
	admin     *h.Admin
	upstream  string
	principal string
	key       string
}

func newCloudWorld(kind string) *cloudWorld {
	w := &cloudWorld{sim: h.StartSim(simKey)}
	w.px = h.StartProxy(h.ProxyOptions{Args: []string{"--reconcile-interval", "1s", "--price-catalog-url", w.sim.URL + "/catalog/prices.json",
		"--job-interval", "price_catalog_fetch=1s"}})
	w.admin = w.px.Admin()
	w.upstream = w.admin.JSON("POST", "/admin/v1/upstreams", cloudUpstream(kind, w.sim), 201)["id"].(string)
	w.principal = w.admin.CreatePrincipal("cloud-app", "claude-sonnet-4-5")
	_, w.key = w.admin.IssueKey(w.principal)
	Eventually(func() any {
		return w.admin.JSON("GET", "/admin/v1/price-catalog", nil, 200)["installed_version"]
	}, 30*time.Second, 200*time.Millisecond).Should(Equal("v1"))
	return w
}

// cloudUpstream is the admin body of a cloud upstream on sim: Bedrock with
// the sim's AWS keys, Vertex with the sim's service account (its token_uri
// the sim's token endpoint); both map the client's alias to their id.
func cloudUpstream(kind string, sim *h.Sim) map[string]any {
	b := map[string]any{"name": kind, "kind": kind, "base_url": sim.URL}
	switch kind {
	case "bedrock":
		b["region"] = "us-east-1"
		b["aws_access_key_id"], b["aws_secret_access_key"] = provider.DefaultAWSAccessKeyID, provider.DefaultAWSSecretAccessKey
		b["model_map"] = map[string]string{"claude-sonnet-4-5": bedrockModelID}
	case "vertex":
		res, err := http.Get(sim.URL + "/_sim/vertex/service-account")
		Expect(err).NotTo(HaveOccurred())
		sa, _ := io.ReadAll(res.Body)
		res.Body.Close()
		b["region"], b["project"], b["service_account_json"] = "us-east5", "sim-project", string(sa)
		b["model_map"] = map[string]string{"claude-sonnet-4-5": vertexModelID}
	}
	return b
}

func (w *cloudWorld) client() *anthropic.Client {
	c := anthropic.NewClient(option.WithBaseURL(w.px.ProxyURL), option.WithAPIKey(w.key), option.WithMaxRetries(0))
	return &c
}

func cloudParams(text string) anthropic.MessageNewParams {
	return anthropic.MessageNewParams{Model: "claude-sonnet-4-5", MaxTokens: 16,
		Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(text))}}
}

// events is the principal's request log once it holds n events.
func (w *cloudWorld) events(n int) []map[string]any {
	GinkgoHelper()
	return principalLog(w.admin, w.principal, n)
}

var _ = Describe("Claude through cloud platforms", func() {
	ctx := context.Background()
	for _, kind := range []string{"bedrock", "vertex"} {
		upstreamID := map[string]string{"bedrock": bedrockModelID, "vertex": vertexModelID}[kind]

		It("serves the Anthropic SDK unchanged from a "+kind+" upstream: create, stream, tools and count_tokens, priced under the client's model with the upstream's id recorded", func() {
			w := newCloudWorld(kind)
			c := w.client()
			msg, err := c.Messages.New(ctx, cloudParams("hello from the cloud"))
			Expect(err).NotTo(HaveOccurred())
			Expect(msg.Content[0].Text).To(Equal("hello from the cloud"))
			Expect(msg.Model).To(Equal("claude-sonnet-4-5"), "the answer names the model as the client asked, not the platform's id")

			s := c.Messages.NewStreaming(ctx, cloudParams("streamed through the cloud"))
			var acc anthropic.Message
			for s.Next() {
				Expect(acc.Accumulate(s.Current())).To(Succeed())
			}
			Expect(s.Err()).NotTo(HaveOccurred())
			Expect(acc.Content[0].Text).To(Equal("streamed through the cloud"))
			Expect(string(acc.StopReason)).To(Equal("end_turn"))
			Expect(acc.Model).To(Equal("claude-sonnet-4-5"), "message_start names the model as the client asked")

			tools := cloudParams("use it")
			tools.Tools = []anthropic.ToolUnionParam{{OfTool: &anthropic.ToolParam{Name: "echo",
				InputSchema: anthropic.ToolInputSchemaParam{Properties: map[string]any{"text": map[string]any{"type": "string"}}}}}}
			tools.ToolChoice = anthropic.ToolChoiceUnionParam{OfTool: &anthropic.ToolChoiceToolParam{Name: "echo"}}
			msg, err = c.Messages.New(ctx, tools)
			Expect(err).NotTo(HaveOccurred())
			Expect(string(msg.StopReason)).To(Equal("tool_use"))
			Expect(string(msg.Content[0].Input)).To(Equal(`{"text":"use it"}`))

			n, err := c.Messages.CountTokens(ctx, anthropic.MessageCountTokensParams{Model: "claude-sonnet-4-5",
				Messages: []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock("count these four words"))}})
			Expect(err).NotTo(HaveOccurred())
			Expect(n.InputTokens).To(Equal(int64(4)), "the platform's count, never a made-up one")

			// The model list is the upstream's aliases, as the principal may use them.
			page, err := c.Models.List(ctx, anthropic.ModelListParams{})
			Expect(err).NotTo(HaveOccurred())
			Expect(page.Data).To(HaveLen(1))
			Expect(page.Data[0].ID).To(Equal("claude-sonnet-4-5"))

			// The platform was asked for its own id of the model.
			calls := w.sim.MessagesWith("hello from the cloud")
			Expect(calls).To(HaveLen(1))
			Expect(calls[0].Header.Get("X-Sim-Cloud-Path")).To(ContainSubstring(upstreamID))

			// Three answers and the count, each under the client's model.
			answers := 0
			for _, ev := range w.events(4) {
				Expect(ev["model"]).To(Equal("claude-sonnet-4-5"))
				Expect(ev["upstream_model"]).To(Equal(upstreamID))
				Expect(ev["upstream_id"]).To(Equal(w.upstream))
				Expect(ev["status"]).To(Equal(200.0))
				if ev["output_tokens"].(float64) > 0 {
					answers++
					Expect(ev["cost_usd"]).NotTo(BeNil(), "priced under the client's model name")
				}
			}
			Expect(answers).To(Equal(3))
		})

		It("serves the OpenAI SDK's chat completions, created and streamed, from a "+kind+" upstream, the alias mapped and answered as asked", func() {
			w := newCloudWorld(kind)
			c := openai.NewClient(option2.WithBaseURL(w.px.ProxyURL+"/v1/"), option2.WithAPIKey(w.key), option2.WithMaxRetries(0))
			chat := func(text string) openai.ChatCompletionNewParams {
				return openai.ChatCompletionNewParams{Model: "claude-sonnet-4-5", MaxCompletionTokens: openai.Int(16),
					Messages: []openai.ChatCompletionMessageParamUnion{openai.UserMessage(text)}}
			}
			res, err := c.Chat.Completions.New(ctx, chat("openai to the cloud"))
			Expect(err).NotTo(HaveOccurred())
			Expect(res.Choices[0].Message.Content).To(Equal("openai to the cloud"))
			Expect(res.Choices[0].FinishReason).To(Equal("stop"))
			Expect(res.Model).To(Equal("claude-sonnet-4-5"), "the name the client asked for, not the platform's id")

			s := c.Chat.Completions.NewStreaming(ctx, chat("streamed openai to the cloud"))
			var text strings.Builder
			chunks := 0
			for s.Next() {
				ch := s.Current()
				chunks++
				Expect(ch.Model).To(Equal("claude-sonnet-4-5"))
				for _, choice := range ch.Choices {
					text.WriteString(choice.Delta.Content)
				}
			}
			Expect(s.Err()).NotTo(HaveOccurred())
			Expect(chunks).To(BeNumerically(">", 1))
			Expect(text.String()).To(Equal("streamed openai to the cloud"))

			// The platform was asked for its id; the events keep both names.
			for _, t := range []string{"openai to the cloud", "streamed openai to the cloud"} {
				calls := w.sim.MessagesWith(t)
				Expect(calls).NotTo(BeEmpty())
				Expect(calls[len(calls)-1].Header.Get("X-Sim-Cloud-Path")).To(ContainSubstring(upstreamID))
			}
			for _, ev := range w.events(2) {
				Expect(ev["model"]).To(Equal("claude-sonnet-4-5"))
				Expect(ev["upstream_model"]).To(Equal(upstreamID))
				Expect(ev["status"]).To(Equal(200.0))
				Expect(ev["cost_usd"]).NotTo(BeNil())
			}
		})

		It("signals a cut "+kind+" stream to the SDK as for the Anthropic API, and records it", func() {
			w := newCloudWorld(kind)
			w.sim.Fault(map[string]any{"path": "/v1/messages", "drop_after_events": 3, "count": 1})
			s := w.client().Messages.NewStreaming(ctx, cloudParams("one two three four five"))
			for s.Next() {
			}
			Expect(s.Err()).To(HaveOccurred())
			ev := w.events(1)[0]
			Expect(ev["error_type"]).To(Equal("stream_interrupted"))
		})

		It("fails over from a throttled "+kind+" upstream and cools it down, as for a 429 of the Anthropic API", func() {
			w := newCloudWorld(kind)
			standby := h.StartSim(simKey)
			w.admin.CreateStandbyUpstream("standby", standby.URL, simKey)
			w.sim.Fault(map[string]any{"path": "/v1/messages", "status": 429})
			msg, err := w.client().Messages.New(ctx, cloudParams("throttled first"))
			Expect(err).NotTo(HaveOccurred())
			Expect(msg.Content[0].Text).To(Equal("throttled first"))
			Expect(standby.MessagesWith("throttled first")).To(HaveLen(1))

			st := w.admin.JSON("GET", "/admin/v1/status", nil, 200)
			var cooling any
			for _, r := range st["routing"].([]any) {
				if m := r.(map[string]any); m["upstream_id"] == w.upstream {
					cooling = m["cooldown_until_unix_secs"]
				}
			}
			Expect(cooling).NotTo(BeNil())
			// While it cools, nothing more is sent to the cloud.
			before := len(w.sim.MessagesWith())
			_, err = w.client().Messages.New(ctx, cloudParams("while cooling"))
			Expect(err).NotTo(HaveOccurred())
			Expect(w.sim.MessagesWith()).To(HaveLen(before))
		})
	}

	// hostCloud is a proxy allowed to use its host's cloud credentials,
	// with env as the host's environment (nothing else of the test's).
	hostCloud := func(env map[string]string) (*h.Admin, *anthropic.Client) {
		px := h.StartProxy(h.ProxyOptions{Args: []string{"--allow-host-cloud-credentials"}, Env: env})
		a := px.Admin()
		_, key := a.IssueKey(a.CreatePrincipal("host-app", "claude-*"))
		c := anthropic.NewClient(option.WithBaseURL(px.ProxyURL), option.WithAPIKey(key), option.WithMaxRetries(0))
		return a, &c
	}
	// noAWS keeps every other link of the AWS chain out of the way.
	noAWS := map[string]string{"AWS_CONFIG_FILE": "/nonexistent", "AWS_SHARED_CREDENTIALS_FILE": "/nonexistent", "AWS_EC2_METADATA_DISABLED": "true"}
	hostBedrock := func(a *h.Admin, c *anthropic.Client, sim *h.Sim, text string) {
		up := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "bedrock-host", "kind": "bedrock", "base_url": sim.URL,
			"region": "us-east-1", "host_credentials": true}, 201)
		Expect(up["credential_mode"]).To(Equal("host"))
		msg, err := c.Messages.New(ctx, cloudParams(text))
		Expect(err).NotTo(HaveOccurred(), "the sim checked the signature made with the host's credentials")
		Expect(msg.Content[0].Text).To(Equal(text))
	}
	withEnv := func(base map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range base {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}

	It("signs with the proxy host's AWS environment keys when an admin asks for them and the server allows it", func() {
		sim := h.StartSim(simKey)
		a, c := hostCloud(withEnv(noAWS, "AWS_ACCESS_KEY_ID", provider.DefaultAWSAccessKeyID, "AWS_SECRET_ACCESS_KEY", provider.DefaultAWSSecretAccessKey))
		hostBedrock(a, c, sim, "signed by the host")
	})

	It("signs with the host's shared credentials file", func() {
		sim := h.StartSim(simKey)
		file := filepath.Join(GinkgoT().TempDir(), "credentials")
		Expect(os.WriteFile(file, []byte("[default]\naws_access_key_id = "+provider.DefaultAWSAccessKeyID+
			"\naws_secret_access_key = "+provider.DefaultAWSSecretAccessKey+"\n"), 0o600)).To(Succeed())
		a, c := hostCloud(withEnv(noAWS, "AWS_SHARED_CREDENTIALS_FILE", file))
		hostBedrock(a, c, sim, "signed from the credentials file")
	})

	It("signs with the container role's credentials (AWS_CONTAINER_CREDENTIALS_FULL_URI), session token included", func() {
		sim := h.StartSim(simKey)
		var fetched atomic.Int32
		role := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			fetched.Add(1)
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]string{"AccessKeyId": provider.DefaultAWSAccessKeyID,
				"SecretAccessKey": provider.DefaultAWSSecretAccessKey, "Token": "sim-role-session",
				"Expiration": time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
		}))
		DeferCleanup(role.Close)
		a, c := hostCloud(withEnv(noAWS, "AWS_CONTAINER_CREDENTIALS_FULL_URI", role.URL+"/v2/credentials"))
		hostBedrock(a, c, sim, "signed with the role")
		Expect(fetched.Load()).To(BeNumerically(">=", 1))
		calls := sim.MessagesWith("signed with the role")
		Expect(calls).To(HaveLen(1))
	})

	It("authorizes Vertex with the host's application default credentials (GOOGLE_APPLICATION_CREDENTIALS)", func() {
		sim := h.StartSim(simKey)
		res, err := http.Get(sim.URL + "/_sim/vertex/service-account")
		Expect(err).NotTo(HaveOccurred())
		sa, _ := io.ReadAll(res.Body)
		res.Body.Close()
		file := filepath.Join(GinkgoT().TempDir(), "adc.json")
		Expect(os.WriteFile(file, sa, 0o600)).To(Succeed())
		a, c := hostCloud(map[string]string{"GOOGLE_APPLICATION_CREDENTIALS": file})
		up := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "vertex-host", "kind": "vertex", "base_url": sim.URL,
			"region": "us-east5", "project": "sim-project", "host_credentials": true}, 201)
		Expect(up["credential_mode"]).To(Equal("host"))
		msg, err := c.Messages.New(ctx, cloudParams("authorized by the host"))
		Expect(err).NotTo(HaveOccurred(), "the sim issued the token to the host's service account and checked it")
		Expect(msg.Content[0].Text).To(Equal("authorized by the host"))
	})

	It("refuses host credentials of either kind unless the server allows them, and creates nothing", func() {
		sim := h.StartSim(simKey)
		px := h.StartProxy(h.ProxyOptions{Env: map[string]string{"AWS_ACCESS_KEY_ID": provider.DefaultAWSAccessKeyID,
			"AWS_SECRET_ACCESS_KEY": provider.DefaultAWSSecretAccessKey}})
		a := px.Admin()
		for _, body := range []map[string]any{
			{"name": "b", "kind": "bedrock", "base_url": sim.URL, "region": "us-east-1", "host_credentials": true},
			{"name": "v", "kind": "vertex", "base_url": sim.URL, "region": "us-east5", "project": "sim-project", "host_credentials": true},
		} {
			a.ExpectError("POST", "/admin/v1/upstreams", body, 400, "host_credentials_not_allowed")
		}
		st, _, list := a.Do("GET", "/admin/v1/upstreams", nil)
		Expect(st).To(Equal(200))
		Expect(string(list)).NotTo(ContainSubstring(`"kind":"bedrock"`))
		Expect(string(list)).NotTo(ContainSubstring(`"kind":"vertex"`))
	})

	It("answers a Bedrock throttle as Anthropic's rate_limit_error when no other upstream can serve", func() {
		w := newCloudWorld("bedrock")
		w.sim.Fault(map[string]any{"path": "/v1/messages", "status": 429, "count": 1})
		_, err := w.client().Messages.New(ctx, cloudParams("alone"))
		var apiErr *anthropic.Error
		Expect(errors.As(err, &apiErr)).To(BeTrue(), "%v", err)
		Expect(apiErr.StatusCode).To(Equal(429))
		Expect(apiErr.RawJSON()).To(ContainSubstring("rate_limit_error"))
		Expect(apiErr.RawJSON()).To(ContainSubstring("ThrottlingException"))
	})
})
