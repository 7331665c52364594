package proxy_test

import (
	"encoding/json"
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

var _ = Describe("Identity", func() {
	It("gives scoped tokens their role on every route, audits who changed what, and lets the operator turn break-glass off", func() {
		px := h.StartProxy(h.ProxyOptions{})
		a := px.Admin()
		token := func(name, role string) *h.Admin {
			t := a.JSON("POST", "/admin/v1/admin-tokens", map[string]any{"name": name, "role": role, "expires_in_secs": 3600}, 201)
			return &h.Admin{Base: px.AdminURL, Token: t["token"].(string)}
		}
		op, viewer, auditor := token("deploy-bot", "operator"), token("grafana", "viewer"), token("soc", "auditor")

		// Bad requests for tokens: a clear code, nothing created.
		a.ExpectError("POST", "/admin/v1/admin-tokens", map[string]any{"name": "x", "role": "root", "expires_in_secs": 3600}, 400, "invalid_role")
		a.ExpectError("POST", "/admin/v1/admin-tokens", map[string]any{"name": "x", "role": "viewer"}, 400, "invalid_request")
		a.ExpectError("DELETE", "/admin/v1/admin-tokens/tok_nope", nil, 404, "admin_token_not_found")
		Expect(a.JSON("GET", "/admin/v1/admin-tokens", nil, 200)["tokens"]).To(HaveLen(3))

		// The operator changes configuration; the viewer and auditor may not.
		up := op.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": "u", "kind": "vendor_api_key", "base_url": "https://api.example", "api_key_value": "sk-ant-conformance-secret"}, 201)["id"].(string)
		_, _, before := a.Do("GET", "/admin/v1/export", nil)
		viewer.ExpectError("DELETE", "/admin/v1/upstreams/"+up, nil, 403, "forbidden")
		auditor.ExpectError("GET", "/admin/v1/upstreams", nil, 403, "forbidden")
		op.ExpectError("POST", "/admin/v1/admin-tokens", map[string]any{"name": "y", "role": "admin", "expires_in_secs": 3600}, 403, "forbidden")
		op.ExpectError("GET", "/admin/v1/audit", nil, 403, "forbidden")
		_, _, after := a.Do("GET", "/admin/v1/export", nil)
		Expect(string(after)).To(Equal(string(before)))
		st, _, _ := viewer.Do("GET", "/metrics", nil)
		Expect(st).To(Equal(200))

		// The auditor reads who changed what: the operator's token, by name.
		var page struct {
			Entries []struct {
				Actor struct {
					Kind      string `json:"kind"`
					TokenName string `json:"token_name"`
				} `json:"actor"`
				Action, ResourceKind, ResourceID string
				After                            json.RawMessage `json:"after"`
			} `json:"entries"`
		}
		_, _, b := auditor.Do("GET", "/admin/v1/audit?actor_kind=token", nil)
		Expect(json.Unmarshal(b, &page)).To(Succeed())
		Expect(page.Entries).To(HaveLen(1))
		Expect(page.Entries[0].Actor.TokenName).To(Equal("deploy-bot"))
		Expect(string(page.Entries[0].After)).To(ContainSubstring(`"name":"u"`))
		Expect(string(b)).NotTo(ContainSubstring("sk-ant-conformance-secret"))
		Expect(a.Metric("svc_admin_changes_total", "actor_kind", "token")).To(Equal(1.0))

		// Revoked: refused from the next request on.
		id := a.JSON("GET", "/admin/v1/admin-tokens", nil, 200)["tokens"].([]any)[1].(map[string]any)["id"].(string)
		a.JSON("DELETE", "/admin/v1/admin-tokens/"+id, nil, 200)
		viewer.ExpectError("GET", "/admin/v1/status", nil, 401, "unauthorized")

		// Break-glass off: an admin token exists, the static one is refused.
		adminTok := token("recovery", "admin")
		cfg := filepath.Join(px.Opts.Dir, "proxy.yaml")
		Expect(os.WriteFile(cfg, []byte("admin:\n  auth:\n    break_glass: false\n"), 0o600)).To(Succeed())
		px.Opts.Args = append(px.Opts.Args, "--config", cfg)
		staticTok := px.Token
		px.Token = adminTok.Token
		px.Restart()
		(&h.Admin{Base: px.AdminURL, Token: staticTok}).ExpectError("GET", "/admin/v1/status", nil, 401, "unauthorized")
		adminTok.JSON("GET", "/admin/v1/me", nil, 200)
		Expect(px.Output()).To(ContainSubstring("admin token: off"))
	})
})
