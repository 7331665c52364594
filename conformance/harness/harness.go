// Package harness starts the project's real binaries for conformance suites:
// each spec gets fresh processes on free loopback ports, with their output
// captured and printed (secrets redacted) only when the spec fails.
package harness

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/pillarhq/pillar/conformance/harness/runner"
	"github.com/pillarhq/pillar/impl/testing/modroot"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

var binDir = flag.String("bin-dir", "", "directory holding the built binaries (default: <module root>/bin)")

// Bin returns the path of a built binary, failing the spec when it is missing.
func Bin(name string) string {
	p := filepath.Join(binDirPath(), name)
	if _, err := os.Stat(p); err != nil {
		Fail(fmt.Sprintf("binary %s not found (run make build, or pass -bin-dir): %v", p, err))
	}
	return p
}

// ModuleRoot finds the directory holding go.mod.
func ModuleRoot() string { return modroot.Dir() }

// RandomHex returns n random bytes as hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Proc is a running binary (see package runner).
type Proc = runner.Proc

// Start runs bin with args and env for the current spec, through the
// suite's runner (Runner); output is kept and printed, secrets redacted,
// only when the spec fails.
func Start(name, bin string, args []string, env map[string]string, secrets ...string) *Proc {
	return runner.StartTB(GinkgoT(), runnerFor(env), bin, args, runner.Options{Label: name, Env: env, Secrets: secrets})
}

// spawn starts bin with a minimal environment plus env, its output kept.
func spawn(name, bin string, args []string, env map[string]string) *Proc {
	p, err := runnerFor(env).Start(bin, args, runner.Options{Label: name, Env: env})
	Expect(err).NotTo(HaveOccurred())
	return p
}

// ---------------------------------------------------------------- sim

// Sim is a running bin/sim.
type Sim struct {
	*Proc
	Addr string
	URL  string
}

// StartSim starts the provider simulator accepting the given API keys.
func StartSim(keys ...string) *Sim { return StartSimWith(nil, keys...) }

// Recorded is one request the sim saw.
type Recorded struct {
	Path     string      `json:"path"`
	RawQuery string      `json:"raw_query"`
	Header   http.Header `json:"header"`
	Body     string      `json:"body"`
}

// Requests lists what the sim received.
func (s *Sim) Requests() []Recorded {
	var out []Recorded
	res, err := http.Get(s.URL + "/_sim/requests")
	Expect(err).NotTo(HaveOccurred())
	defer res.Body.Close()
	Expect(json.NewDecoder(res.Body).Decode(&out)).To(Succeed())
	return out
}

// MessagesWith lists, in the order received, the /v1/messages requests
// whose body holds every one of the substrings (all of them with none).
func (s *Sim) MessagesWith(substrings ...string) []Recorded {
	var out []Recorded
	for _, r := range s.Requests() {
		if r.Path != "/v1/messages" {
			continue
		}
		all := true
		for _, sub := range substrings {
			all = all && strings.Contains(r.Body, sub)
		}
		if all {
			out = append(out, r)
		}
	}
	return out
}

// Fault queues a fault (see docs/sim.md).
func (s *Sim) Fault(f map[string]any) {
	b, _ := json.Marshal(f)
	res, err := http.Post(s.URL+"/_sim/faults", "application/json", bytes.NewReader(b))
	Expect(err).NotTo(HaveOccurred())
	res.Body.Close()
	Expect(res.StatusCode).To(Equal(http.StatusNoContent))
}

// -------------------------------------------------------------- proxy

// ProxyOptions configures StartProxy.
type ProxyOptions struct {
	// DatabaseURL defaults to a fresh SQLite file in a temp directory.
	DatabaseURL string
	// Dir holds the SQLite file (reuse it to restart on the same data).
	Dir  string
	Env  map[string]string
	Args []string
	// Token and MasterKey default to fresh random values.
	Token, MasterKey string
	// AdminAddr is the admin listener's address (default: a free one), for
	// configuration that names it before the start (an OIDC redirect URL).
	AdminAddr string
	// StrictEgress starts the proxy without --allow-private-upstreams
	// (security specs): by default the harness allows them, since every
	// simulator listens on loopback.
	StrictEgress bool
}

// Proxy is a running bin/proxy.
type Proxy struct {
	*Proc
	Opts      ProxyOptions
	ProxyAddr string
	AdminAddr string
	ProxyURL  string
	AdminURL  string
	Token     string
}

// StartProxy starts bin/proxy and waits until its admin API answers.
func StartProxy(o ProxyOptions) *Proxy {
	if o.Dir == "" {
		o.Dir = GinkgoT().TempDir()
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = "sqlite://" + filepath.Join(o.Dir, "proxy.db")
	}
	if o.Token == "" {
		o.Token = "adm-" + RandomHex(16)
	}
	if o.MasterKey == "" && !strings.HasPrefix(o.DatabaseURL, "sqlite://") {
		o.MasterKey = RandomHex(32)
	}
	if o.AdminAddr == "" {
		o.AdminAddr = FreeAddr()
	}
	p := &Proxy{Opts: o, ProxyAddr: FreeAddr(), AdminAddr: o.AdminAddr, Token: o.Token}
	p.ProxyURL, p.AdminURL = "http://"+p.ProxyAddr, "http://"+p.AdminAddr
	p.launch()
	return p
}

// launch starts the process on the proxy's addresses and data and waits
// until its admin API answers.
func (p *Proxy) launch() {
	o := p.Opts
	env := map[string]string{"PROXY_ADMIN_TOKEN": o.Token}
	if o.MasterKey != "" {
		env["PROXY_MASTER_KEY"] = o.MasterKey
	}
	for k, v := range o.Env {
		env[k] = v
	}
	args := []string{"--proxy-listen", p.ProxyAddr, "--admin-listen", p.AdminAddr, "--database-url", o.DatabaseURL, "--log-format", "json"}
	if !o.StrictEgress {
		args = append(args, "--allow-private-upstreams")
	}
	args = append(args, o.Args...)
	p.Proc = Start("proxy", Bin("proxy"), args, env, o.Token, o.MasterKey)
	Eventually(func() int {
		if p.Exited() {
			StopTrying("proxy exited:\n" + p.Output()).Now()
		}
		st, _, _ := p.Admin().Do("GET", "/admin/v1/status", nil)
		return st
	}, 30*time.Second, 50*time.Millisecond).Should(Equal(200), "proxy did not become ready")
}

// Restart stops the proxy and starts it again on the same data and ports.
func (p *Proxy) Restart() {
	p.Stop()
	p.launch()
}

// Admin returns a client for the proxy's admin API.
func (p *Proxy) Admin() *Admin { return &Admin{Base: p.AdminURL, Token: p.Token} }

// Admin is a small admin API client.
type Admin struct {
	Base, Token string
}

// Do sends a request; body may be nil, a string or a value to encode.
// hdr holds header name/value pairs.
func (a *Admin) Do(method, path string, body any, hdr ...string) (int, http.Header, []byte) {
	st, h, b, err := a.send(method, path, body, hdr...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return st, h, b
}

// Metric is the value of a series of the admin /metrics (labels are
// name, value pairs the series carries; see promtest.Families.Value): 0
// while the series does not exist, as a counter that has counted nothing.
func (a *Admin) Metric(name string, labels ...string) float64 {
	st, _, b := a.Do("GET", "/metrics", nil)
	ExpectWithOffset(1, st).To(Equal(http.StatusOK), string(b))
	fs, err := promtest.Parse(b)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	v, _ := fs.Value(name, labels...)
	return v
}

// send is Do with a request that cannot be built returned as an error; a
// failed round trip is status 0 with the error's text as the body.
func (a *Admin) send(method, path string, body any, hdr ...string) (int, http.Header, []byte, error) {
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, err := json.Marshal(b)
		if err != nil {
			return 0, nil, nil, err
		}
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, a.Base+path, rd)
	if err != nil {
		return 0, nil, nil, err
	}
	if a.Token != "" {
		req.Header.Set("Authorization", "Bearer "+a.Token)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error()), nil
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b, nil
}

// JSON sends a request expecting status and decodes the answer.
func (a *Admin) JSON(method, path string, body any, status int, hdr ...string) map[string]any {
	m, err := a.Call(method, path, body, status, hdr...)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return m
}

// Call is JSON for code outside a spec: another status, or an answer that
// is not a JSON object, is an error naming the request and the body.
func (a *Admin) Call(method, path string, body any, status int, hdr ...string) (map[string]any, error) {
	st, _, b, err := a.send(method, path, body, hdr...)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if st != status {
		return nil, fmt.Errorf("%s %s: status %d, want %d: %s", method, path, st, status, b)
	}
	var m map[string]any
	if len(b) > 0 {
		if err := json.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s %s: %w: %s", method, path, err, b)
		}
	}
	return m, nil
}

// ExpectError checks the admin error shape, status and code.
func (a *Admin) ExpectError(method, path string, body any, status int, code string, hdr ...string) {
	st, _, b := a.Do(method, path, body, hdr...)
	var e struct {
		Error struct{ Code, Message string }
	}
	ExpectWithOffset(1, json.Unmarshal(b, &e)).To(Succeed(), string(b))
	ExpectWithOffset(1, st).To(Equal(status), string(b))
	ExpectWithOffset(1, e.Error.Code).To(Equal(code), string(b))
	ExpectWithOffset(1, e.Error.Message).NotTo(BeEmpty())
}

// CreateUpstream creates a vendor_api_key upstream pointing at base.
func (a *Admin) CreateUpstream(name, base, key string) string {
	m := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": name, "kind": "vendor_api_key", "base_url": base, "api_key_value": key}, 201)
	return m["id"].(string)
}

// CreateStandbyUpstream creates an API-key upstream of weight 0: the
// built-in router sends it work only after the weighted upstreams of its
// class failed (docs/routing.md), so a spec that needs a fixed first and
// second upstream creates the second with it.
func (a *Admin) CreateStandbyUpstream(name, base, key string) string {
	m := a.JSON("POST", "/admin/v1/upstreams", map[string]any{"name": name, "kind": "vendor_api_key", "base_url": base, "api_key_value": key, "weight": 0}, 201)
	return m["id"].(string)
}

// CreatePrincipal creates a machine principal allowed the given models.
func (a *Admin) CreatePrincipal(name string, models ...string) string {
	if models == nil {
		models = []string{}
	}
	m := a.JSON("POST", "/admin/v1/principals", map[string]any{"name": name, "kind": "machine", "allowed_models": models}, 201)
	return m["id"].(string)
}

// IssueKey issues a key and returns (key id, plaintext).
func (a *Admin) IssueKey(principalID string) (string, string) {
	m := a.JSON("POST", "/admin/v1/principals/"+principalID+"/keys", map[string]any{"name": "conformance"}, 201)
	return m["id"].(string), m["key"].(string)
}

// Messages posts a Messages request to the proxy with the given headers.
func Messages(proxyURL, body string, hdr ...string) (int, http.Header, []byte) {
	req, err := http.NewRequest("POST", proxyURL+"/v1/messages", strings.NewReader(body))
	Expect(err).NotTo(HaveOccurred())
	req.Header.Set("content-type", "application/json")
	req.Header.Set("anthropic-version", "2023-06-01")
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, []byte(err.Error())
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	return res.StatusCode, res.Header, b
}

// AnthropicErrorType decodes an Anthropic error body's type.
func AnthropicErrorType(body []byte) string {
	var e struct {
		Type  string
		Error struct{ Type, Message string }
	}
	if json.Unmarshal(body, &e) != nil || e.Type != "error" || e.Error.Message == "" {
		return "not an Anthropic error: " + string(body)
	}
	return e.Error.Type
}

// RunTool runs a binary to completion, expecting success, and returns its output.
func RunTool(bin string, args []string, env map[string]string) string {
	out, err := runTool(bin, args, env)
	ExpectWithOffset(1, err).NotTo(HaveOccurred(), out)
	return out
}

// RunToolFail runs a binary expecting it to fail, and returns its output.
func RunToolFail(bin string, args []string, env map[string]string) string {
	out, err := runTool(bin, args, env)
	ExpectWithOffset(1, err).To(HaveOccurred(), out)
	return out
}

func runTool(bin string, args []string, env map[string]string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// RunCommand runs a command (looked up in PATH) and returns its output.
func RunCommand(name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	return string(out), err
}

var (
	daemonsMu sync.Mutex
	daemons   []*Proc
)

// StartDaemon runs a binary for a whole suite (from BeforeSuite): it is
// not tied to a spec, and StopDaemons ends it.
func StartDaemon(name, bin string, args []string) *Proc {
	p := spawn(name, bin, args, nil)
	daemonsMu.Lock()
	daemons = append(daemons, p)
	daemonsMu.Unlock()
	return p
}

// StopDaemons stops every daemon; with PILLAR_DAEMON_LOGS set it prints
// their output (the CSI calls each daemon logs).
func StopDaemons() {
	daemonsMu.Lock()
	defer daemonsMu.Unlock()
	for _, p := range daemons {
		p.Stop()
		if os.Getenv("PILLAR_DAEMON_LOGS") != "" {
			GinkgoWriter.Printf("\n----- output of %s -----\n%s\n", p.Name, p.Output())
		}
	}
	daemons = nil
}
