package harness

import (
	"bytes"
	"encoding/json"
	"net"
	"net/http"
	"net/url"
	"time"

	. "github.com/onsi/gomega"
)

// StartSimWith starts the provider simulator with extra flags.
func StartSimWith(args []string, keys ...string) *Sim {
	addr := FreeAddr()
	all := append([]string{"--listen", addr}, args...)
	for _, k := range keys {
		all = append(all, "--api-key", k)
	}
	s := &Sim{Proc: Start("sim", Bin("sim"), all, nil, keys...), Addr: addr, URL: "http://" + addr}
	Eventually(func() error {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err
	}, 20*time.Second, 20*time.Millisecond).Should(Succeed(), "sim did not start:\n%s", s.Output())
	return s
}

// Account reads a simulated subscription account (GET /_sim/accounts/{id}).
func (s *Sim) Account(id string) map[string]any {
	res, err := http.Get(s.URL + "/_sim/accounts/" + id)
	Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	Expect(res.StatusCode).To(Equal(200), "account %s", id)
	var m map[string]any
	Expect(json.NewDecoder(res.Body).Decode(&m)).To(Succeed())
	return m
}

// Counter reads one numeric field of an account.
func (s *Sim) Counter(account, field string) int {
	v, _ := s.Account(account)[field].(float64)
	return int(v)
}

// SetAccount changes a simulated account (POST /_sim/accounts/{id}).
func (s *Sim) SetAccount(id string, state map[string]any) {
	b, _ := json.Marshal(state)
	res, err := http.Post(s.URL+"/_sim/accounts/"+id, "application/json", bytes.NewReader(b))
	Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	Expect(res.StatusCode).To(BeNumerically("<", 300), "set account %s", id)
}

// CreateOAuthUpstream creates a vendor_oauth upstream whose API and OAuth
// endpoints are the sim's.
func (a *Admin) CreateOAuthUpstream(name string, sim *Sim) string {
	m := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": name, "kind": "vendor_oauth", "base_url": sim.URL,
		"oauth_authorize_url": sim.URL + "/oauth/authorize", "oauth_token_url": sim.URL + "/v1/oauth/token"}, 201)
	return m["id"].(string)
}

// Authorize runs the browser's part of the flow: it opens the
// authorization URL (the sim approves a plain GET for account) and returns
// the code and state of the redirect.
func Authorize(authorizationURL, account string) (code, state string) {
	u, err := url.Parse(authorizationURL)
	Expect(err).NotTo(HaveOccurred())
	q := u.Query()
	q.Set("sim_account", account)
	u.RawQuery = q.Encode()
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	res, err := c.Get(u.String())
	Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	Expect(res.StatusCode).To(Equal(http.StatusFound))
	loc, err := url.Parse(res.Header.Get("Location"))
	Expect(err).NotTo(HaveOccurred())
	return loc.Query().Get("code"), loc.Query().Get("state")
}

// ConnectOAuth runs start, authorize and complete for an upstream and
// returns the completed upstream.
func (a *Admin) ConnectOAuth(upstreamID, account string) map[string]any {
	st := a.JSON("POST", "/admin/v1/upstreams/"+upstreamID+"/oauth/start", nil, 200)
	code, state := Authorize(st["authorization_url"].(string), account)
	ExpectWithOffset(1, state).To(Equal(st["state"]))
	return a.JSON("POST", "/admin/v1/upstreams/"+upstreamID+"/oauth/complete", map[string]any{"state": state, "code": code}, 200)
}

// Jobs lists the scheduler's jobs of a type and key prefix.
func (a *Admin) Jobs(jobType, keyPrefix string) []map[string]any {
	m := a.JSON("GET", "/admin/scheduler/jobs?job_type="+url.QueryEscape(jobType)+"&key_prefix="+url.QueryEscape(keyPrefix), nil, 200)
	var out []map[string]any
	for _, j := range m["jobs"].([]any) {
		out = append(out, j.(map[string]any))
	}
	return out
}

// LogEvents returns the JSON log records of a process whose attributes
// include every given key/value pair.
func LogEvents(p *Proc, kv ...string) []map[string]any {
	var out []map[string]any
	for _, line := range bytes.Split([]byte(p.RawOutput()), []byte("\n")) {
		var m map[string]any
		if json.Unmarshal(line, &m) != nil {
			continue
		}
		ok := true
		for i := 0; i+1 < len(kv); i += 2 {
			if v, _ := m[kv[i]].(string); v != kv[i+1] {
				ok = false
			}
		}
		if ok {
			out = append(out, m)
		}
	}
	return out
}
