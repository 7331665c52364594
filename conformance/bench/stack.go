package bench

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pillarhq/pillar/conformance/harness/runner"
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

// WaitUp waits until url answers anything over HTTP; after 10 s it
// returns an error with the end of the process's log.
func (s *Stack) WaitUp(p *runner.Proc, url string) error {
	c := &http.Client{Timeout: time.Second}
	for i := 0; i < 100; i++ {
		if res, err := c.Get(url); err == nil {
			res.Body.Close()
			return nil
		}
		if p.Exited() {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	lines := strings.Split(strings.TrimRight(p.Output(), "\n"), "\n")
	if len(lines) > 20 {
		lines = lines[len(lines)-20:]
	}
	return fmt.Errorf("%s did not come up at %s: %s", p.Name, url, strings.Join(lines, "\n"))
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

// FreeAddr is a loopback address with a port free right now.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// RandomHex is n random bytes in hex.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Seed creates, through the admin API at adminURL, one upstream on the
// sim and one principal allowed every model, and returns a fresh key for
// it.
func Seed(adminURL, token, simURL, simKey string) (string, error) {
	if _, err := AdminCall(adminURL, token, "/upstreams", map[string]any{"name": "sim", "kind": "vendor_api_key", "base_url": simURL, "api_key_value": simKey}); err != nil {
		return "", err
	}
	pr, err := AdminCall(adminURL, token, "/principals", map[string]any{"name": "bench", "kind": "machine", "allowed_models": []string{"*"}})
	if err != nil {
		return "", err
	}
	id, _ := pr["id"].(string)
	if id == "" {
		return "", fmt.Errorf("no principal id in %v", pr)
	}
	k, err := AdminCall(adminURL, token, "/principals/"+id+"/keys", map[string]any{})
	if err != nil {
		return "", err
	}
	key, _ := k["key"].(string)
	if key == "" {
		return "", fmt.Errorf("no key in the answer")
	}
	return key, nil
}

// AdminCall POSTs body to the admin API's path (under /admin/v1) and
// decodes the answer; a status of 300 or more is an error.
func AdminCall(adminURL, token, path string, body any) (map[string]any, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequest("POST", adminURL+"/admin/v1"+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	out, _ := io.ReadAll(res.Body)
	if res.StatusCode >= 300 {
		return nil, fmt.Errorf("POST %s: %d %s", path, res.StatusCode, out)
	}
	var m map[string]any
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("POST %s: %w", path, err)
	}
	return m, nil
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
