package bench

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/conformance/harness/runner"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
	"github.com/pillarhq/pillar/sim/provider"
)

// Stack is the processes one bench section measures, started through the
// conformance harness's process runner (the real binaries: the bench
// measures them, not an in-process call), each logging to Dir/<label>.log.
type Stack struct {
	Runner runner.Runner
	Dir    string
	procs  []*runner.Proc
}

// NewStack runs the binaries in binDir with the caller's environment, as
// the shell that runs make bench would.
func NewStack(binDir, dir string) *Stack {
	return &Stack{Runner: runner.Process{Dir: binDir, InheritEnv: true}, Dir: dir}
}

// Start starts name (a binary in the stack's directory, or a path).
func (s *Stack) Start(label, name string, args []string, env map[string]string) (*runner.Proc, error) {
	log, err := os.Create(filepath.Join(s.Dir, label+".log"))
	if err != nil {
		return nil, err
	}
	p, err := s.Runner.Start(name, args, runner.Options{Label: label, Env: env, Log: log})
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", label, err)
	}
	s.procs = append(s.procs, p)
	return p, nil
}

// WaitUp waits until url answers anything over HTTP; after 10 s, or as
// soon as the process has ended, it returns an error with the end of the
// process's log.
func (s *Stack) WaitUp(p *runner.Proc, url string) error {
	c := &http.Client{Timeout: time.Second}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := waitfor.Poll(ctx, 100*time.Millisecond, func() error {
		if p.Exited() {
			cancel()
			return errors.New("exited")
		}
		res, err := c.Get(url)
		if err == nil {
			res.Body.Close()
		}
		return err
	})
	if err == nil {
		return nil
	}
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return fmt.Errorf("%s did not come up at %s (%v): %s", p.Name, url, err, strings.Join(lines, "\n"))
}

// Stop stops every process of the stack and waits for them.
func (s *Stack) Stop() {
	for _, p := range s.procs {
		p.Terminate()
	}
	for _, p := range s.procs {
		p.Stop()
	}
	s.procs = nil
}

// Proxy is a bin/proxy the stack started on a SQLite file of its own
// (or DatabaseURL), seeded through its admin API.
type Proxy struct {
	Proc     *runner.Proc
	URL      string // the proxy listener
	AdminURL string
	Admin    *harness.Admin
	Key      string // the seeded principal's key; empty when not seeded
}

// ProxyOptions starts one gateway; zero values are bin/proxy on a fresh
// SQLite file with a random admin token.
type ProxyOptions struct {
	Label, Bin  string // default "proxy"
	DatabaseURL string
	Token       string
	Env         map[string]string
	// Upstream, when set, is created with a principal allowed every model
	// and a key for it (Proxy.Key).
	Upstream map[string]any
}

// StartProxy starts a gateway and waits until its admin API answers.
func (s *Stack) StartProxy(o ProxyOptions) (*Proxy, error) {
	if o.Label == "" {
		o.Label = "proxy"
	}
	if o.Bin == "" {
		o.Bin = "proxy"
	}
	if o.DatabaseURL == "" {
		o.DatabaseURL = "sqlite://" + filepath.Join(s.Dir, o.Label+".db")
	}
	if o.Token == "" {
		o.Token = "bench-" + harness.RandomHex(16)
	}
	px, err := harness.ListenAddr()
	if err != nil {
		return nil, err
	}
	adm, err := harness.ListenAddr()
	if err != nil {
		return nil, err
	}
	env := maps.Clone(o.Env)
	if env == nil {
		env = map[string]string{}
	}
	env["PROXY_ADMIN_TOKEN"] = o.Token
	g := &Proxy{URL: "http://" + px, AdminURL: "http://" + adm, Admin: &harness.Admin{Base: "http://" + adm, Token: o.Token}}
	if g.Proc, err = s.Start(o.Label, o.Bin, []string{"--proxy-listen", px, "--admin-listen", adm, "--database-url", o.DatabaseURL,
		"--log-level", "warn", "--allow-private-upstreams"}, env); err != nil {
		return nil, err
	}
	if err := s.WaitUp(g.Proc, g.AdminURL+"/admin/v1/status"); err != nil {
		return nil, err
	}
	if o.Upstream != nil {
		if g.Key, _, err = Seed(g.Admin, o.Upstream); err != nil {
			return nil, fmt.Errorf("seed %s: %w", o.Label, err)
		}
	}
	return g, nil
}

// Sim is a bin/sim the stack started.
type Sim struct {
	Proc     *runner.Proc
	URL, Key string
}

// StartSim starts the provider simulator accepting one fresh API key (and
// the simulator's default AWS keys) and waits until it answers.
func (s *Stack) StartSim() (*Sim, error) {
	addr, err := harness.ListenAddr()
	if err != nil {
		return nil, err
	}
	sim := &Sim{URL: "http://" + addr, Key: "sk-sim-bench-" + harness.RandomHex(8)}
	return sim, sim.start(s, "sim")
}

// Restart stops the simulator and starts it again on its address and key.
func (sim *Sim) Restart(s *Stack) error {
	sim.Proc.Stop()
	return sim.start(s, "sim-restarted")
}

func (sim *Sim) start(s *Stack, label string) error {
	var err error
	if sim.Proc, err = s.Start(label, "sim", []string{"--listen", strings.TrimPrefix(sim.URL, "http://"), "--api-key", sim.Key}, nil); err != nil {
		return err
	}
	return s.WaitUp(sim.Proc, sim.URL+"/_sim/clock")
}

// VendorUpstream is the admin body of an API-key upstream on the simulator.
func (sim *Sim) VendorUpstream() map[string]any {
	return map[string]any{"name": "sim", "kind": "vendor_api_key", "base_url": sim.URL, "api_key_value": sim.Key}
}

// BedrockModelID is the Bedrock model id the bench's model maps to.
const BedrockModelID = "anthropic.claude-sonnet-4-5-20250929-v1:0"

// BedrockUpstream is the admin body of a Bedrock upstream on the
// simulator: its default AWS keys (sealed by the gateway like any
// credential), a region for SigV4, the bench's model mapped to a Bedrock id.
func (sim *Sim) BedrockUpstream() map[string]any {
	return map[string]any{"name": "bedrock", "kind": "bedrock", "base_url": sim.URL, "region": "us-east-1",
		"aws_access_key_id": provider.DefaultAWSAccessKeyID, "aws_secret_access_key": provider.DefaultAWSSecretAccessKey,
		"model_map": map[string]string{"claude-sonnet-4-5": BedrockModelID}}
}

// Seed creates upstream through a, then one principal allowed every model,
// and returns a fresh key for it and the principal's id.
func Seed(a *harness.Admin, upstream map[string]any) (key, principal string, err error) {
	if _, err := a.Call("POST", "/admin/v1/upstreams", upstream, http.StatusCreated); err != nil {
		return "", "", err
	}
	pr, err := a.Call("POST", "/admin/v1/principals", map[string]any{"name": "bench", "kind": "machine", "allowed_models": []string{"*"}}, http.StatusCreated)
	if err != nil {
		return "", "", err
	}
	principal, _ = pr["id"].(string)
	if principal == "" {
		return "", "", fmt.Errorf("no principal id in %v", pr)
	}
	k, err := a.Call("POST", "/admin/v1/principals/"+principal+"/keys", map[string]any{}, http.StatusCreated)
	if err != nil {
		return "", "", err
	}
	if key, _ = k["key"].(string); key == "" {
		return "", "", fmt.Errorf("no key in the answer")
	}
	return key, principal, nil
}

// FreshSchema creates an empty schema on the PostgreSQL server at
// serverURL and returns a URL whose connections use it, and a func that
// drops it.
func FreshSchema(ctx context.Context, serverURL string) (string, func(), error) {
	name := fmt.Sprintf("bench_%d_%d", time.Now().Unix(), os.Getpid())
	exec := func(ctx context.Context, stmt string) error {
		conn, err := pgx.Connect(ctx, serverURL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, stmt)
		return err
	}
	if err := exec(ctx, "CREATE SCHEMA "+name); err != nil {
		return "", nil, fmt.Errorf("create schema: %w", err)
	}
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
	}
	u, err := url.Parse(serverURL)
	if err != nil {
		drop()
		return "", nil, err
	}
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String(), drop, nil
}
