// Command demo is make demo: bin/sim and bin/proxy on loopback (started by
// the conformance harness's process runner), an upstream, a principal and
// a key created through the admin API, then real requests, each shown.
// KEEP=1 leaves the sim and the proxy running afterwards (and their data
// directory), so the dashboard shows the demo's traffic.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pillarhq/pillar/conformance/harness/runner"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	bin := "bin"
	if len(os.Args) > 1 {
		bin = os.Args[1]
	}
	// The demo's processes see the caller's environment, as they did
	// from the shell.
	d := &demo{keep: os.Getenv("KEEP") != "", runner: runner.Process{Dir: bin, InheritEnv: true}, out: os.Stdout, log: os.Stderr}
	err := d.run(ctx)
	if err != nil || !d.keep {
		d.cleanup()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}

// step prints as scripts/lib.sh's step does.
func (d *demo) step(format string, a ...any) {
	fmt.Fprintf(d.log, "\033[1m==> %s\033[0m\n", fmt.Sprintf(format, a...))
}

type demo struct {
	keep     bool
	runner   runner.Runner
	out, log io.Writer // what the demo shows, and its steps
	tmp      string
	procs    []*runner.Proc
}

func (d *demo) cleanup() {
	for _, p := range d.procs {
		p.Stop()
	}
	if d.tmp != "" {
		os.RemoveAll(d.tmp)
	}
}

// start runs a binary with its output in tmp/<name>.log.
func (d *demo) start(name string, args []string, env map[string]string) error {
	log, err := os.Create(filepath.Join(d.tmp, name+".log"))
	if err != nil {
		return err
	}
	p, err := d.runner.Start(name, args, runner.Options{Env: env, Log: log})
	if err != nil {
		return err
	}
	d.procs = append(d.procs, p)
	return nil
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func (d *demo) run(ctx context.Context) error {
	var err error
	if d.tmp, err = os.MkdirTemp("", "demo."); err != nil {
		return err
	}
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = freeAddr(); err != nil {
			return err
		}
	}
	simAddr, proxyAddr, adminAddr := addrs[0], addrs[1], addrs[2]
	token := fmt.Sprintf("demo-admin-%d", time.Now().Unix())
	const simKey = "sk-sim-demo"

	d.step("starting the provider sim on %s", simAddr)
	if err := d.start("sim", []string{"--listen", simAddr, "--api-key", simKey}, nil); err != nil {
		return err
	}
	d.step("starting the proxy (proxy %s, admin %s, database %s/demo.db)", proxyAddr, adminAddr, d.tmp)
	if err := d.start("proxy", []string{"--proxy-listen", proxyAddr, "--admin-listen", adminAddr,
		"--database-url", "sqlite://" + d.tmp + "/demo.db", "--allow-private-upstreams"}, map[string]string{"PROXY_ADMIN_TOKEN": token}); err != nil {
		return err
	}
	c := &client{admin: "http://" + adminAddr + "/admin/v1", proxy: "http://" + proxyAddr + "/v1/messages", token: token}
	if err := c.waitReady(ctx, 10*time.Second); err != nil {
		fmt.Fprint(d.log, d.procs[1].Output())
		return errors.New("proxy did not start")
	}

	d.step("POST /admin/v1/upstreams (vendor_api_key → the sim)")
	up, err := c.api("POST", "/upstreams", fmt.Sprintf(`{"name":"sim","kind":"vendor_api_key","base_url":"http://%s","api_key_value":"%s"}`, simAddr, simKey))
	if err != nil {
		return err
	}
	fmt.Fprintln(d.out, strings.TrimRight(up, "\n"))
	d.step("POST /admin/v1/principals")
	pr, err := c.api("POST", "/principals", `{"name":"demo-app","kind":"machine","allowed_models":["claude-*"]}`)
	if err != nil {
		return err
	}
	fmt.Fprintln(d.out, strings.TrimRight(pr, "\n"))
	pid := field(pr, "id")
	d.step("POST /admin/v1/principals/%s/keys (the plaintext key is shown once)", pid)
	kr, err := c.api("POST", "/principals/"+pid+"/keys", `{"name":"demo"}`)
	if err != nil {
		return err
	}
	key := field(kr, "key")
	fmt.Fprintf(d.out, "key: %s… (hidden)\n", prefix(key, 12))

	d.step("POST /v1/messages through the proxy")
	if err := c.messages(d.out, "x-api-key", key, `{"model":"claude-sonnet-4-5","max_tokens":32,"messages":[{"role":"user","content":"Hello from the demo"}]}`); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	d.step("the same request, streaming")
	if err := c.messages(d.out, "Authorization", "Bearer "+key, `{"model":"claude-sonnet-4-5","max_tokens":32,"stream":true,"messages":[{"role":"user","content":"Hello again"}]}`); err != nil {
		return err
	}
	d.step("a model outside allowed_models is refused")
	if err := c.messages(d.out, "x-api-key", key, `{"model":"gpt-4o","max_tokens":8,"messages":[]}`); err != nil {
		return err
	}
	fmt.Fprintln(d.out)
	d.step("a few more requests, so the dashboard has traffic to show")
	for i := 1; i <= 5; i++ {
		if err := c.messages(io.Discard, "x-api-key", key, fmt.Sprintf(`{"model":"claude-haiku-4-5","max_tokens":16,"messages":[{"role":"user","content":"ping %d"}]}`, i)); err != nil {
			return err
		}
	}
	if d.keep {
		pids := make([]string, len(d.procs))
		for i, p := range d.procs {
			pids[i] = fmt.Sprint(p.Pid())
			p.Release()
		}
		d.step("demo done; the sim and the proxy keep running (KEEP=1)")
		fmt.Fprintf(d.out, `  dashboard   http://%s/dashboard/   (admin token: %s)
  proxy       %s
  data        %s
  stop them:  kill %s && rm -rf %s
`, adminAddr, token, c.proxy, d.tmp, strings.Join(pids, " "), d.tmp)
		return nil
	}
	d.step("demo done; everything was on loopback and is being stopped")
	return nil
}

func prefix(s string, n int) string {
	if len(s) < n {
		return s
	}
	return s[:n]
}

// field is a top-level string field of a JSON object, "" when absent.
func field(body, name string) string {
	var m map[string]any
	_ = json.Unmarshal([]byte(body), &m)
	s, _ := m[name].(string)
	return s
}

type client struct {
	admin, proxy, token string
}

func (c *client) waitReady(ctx context.Context, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		if _, err := c.do("GET", c.admin+"/status", "", true); err == nil {
			return nil
		} else if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// api calls the admin API and returns the body, whatever the status (the
// demo shows it).
func (c *client) api(method, path, body string) (string, error) {
	return c.do(method, c.admin+path, body, false)
}

func (c *client) do(method, url, body string, wantOK bool) (string, error) {
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+c.token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err == nil && wantOK && res.StatusCode/100 != 2 {
		err = fmt.Errorf("%s %s: %s", method, url, res.Status)
	}
	return string(b), err
}

// messages sends a Messages request with one credential header and copies
// the answer (a stream as it arrives) to w.
func (c *client) messages(w io.Writer, header, value, body string) error {
	req, err := http.NewRequest("POST", c.proxy, strings.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set(header, value)
	req.Header.Set("anthropic-version", "2023-06-01")
	req.Header.Set("content-type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	_, err = io.Copy(w, res.Body)
	return err
}
