package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Profiler collects CPU profiles from a proxy's /debug/pprof/profile (on
// its admin listener, with the admin token) in back-to-back windows for as
// long as a load runs, so the profile covers the load and little else.
type Profiler struct {
	AdminURL, Token string
	// Window is one profile's length (the endpoint takes whole seconds).
	Window time.Duration
	// Dir receives the profiles, Prefix-<n>.pb.gz.
	Dir, Prefix string

	mu    sync.Mutex
	files []string
	err   error
	stop  context.CancelFunc
	done  chan struct{}
}

// Start begins profiling until Stop.
func (p *Profiler) Start(ctx context.Context) {
	ctx, p.stop = context.WithCancel(ctx)
	p.done = make(chan struct{})
	secs := max(1, int(p.Window/time.Second))
	go func() {
		defer close(p.done)
		for n := 0; ctx.Err() == nil; n++ {
			path := filepath.Join(p.Dir, fmt.Sprintf("%s-%d.pb.gz", p.Prefix, n))
			err := p.fetch(ctx, secs, path)
			p.mu.Lock()
			switch {
			case err == nil:
				p.files = append(p.files, path)
			case ctx.Err() == nil && p.err == nil:
				p.err = err
			}
			p.mu.Unlock()
			if err != nil && ctx.Err() == nil {
				return
			}
		}
	}()
}

// Done is closed when profiling ends: after Stop, or at the first window
// that failed.
func (p *Profiler) Done() <-chan struct{} { return p.done }

// Stop ends profiling: a window still running when the load ended is
// dropped (it would cover idle time after the load). It returns the
// profiles written.
func (p *Profiler) Stop() ([]string, error) {
	p.stop()
	<-p.done
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.files, p.err
}

func (p *Profiler) fetch(ctx context.Context, secs int, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.AdminURL+"/debug/pprof/profile?seconds="+strconv.Itoa(secs), nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+p.Token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(res.Body, 512))
		return fmt.Errorf("profile: %d %s (is the proxy started with PROXY_DEBUG_PPROF=true?)", res.StatusCode, b)
	}
	b, err := io.ReadAll(res.Body)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o644)
}

// PprofTop is `go tool pprof -top` over profiles (merged), nodes lines
// long, sorted by flat time or, with cum, by cumulative time.
func PprofTop(ctx context.Context, profiles []string, nodes int, cum bool) (string, error) {
	if len(profiles) == 0 {
		return "", errors.New("no profiles")
	}
	args := []string{"tool", "pprof", "-top", "-nodecount=" + strconv.Itoa(nodes)}
	if cum {
		args = append(args, "-cum")
	}
	out, err := exec.CommandContext(ctx, "go", append(args, profiles...)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go tool pprof: %w: %s", err, out)
	}
	return string(out), nil
}

// CPUClock reads the CPU time (user and system) processes have used, and
// the machine's, from /proc (Linux): what a load cost each process and
// how busy all cores were meanwhile.
type CPUClock struct {
	Procs   map[string]time.Duration
	Machine struct{ Busy, Total time.Duration }
}

// ReadCPUClock reads pids (label → pid) and /proc/stat; a process that
// cannot be read is left out. The bench itself is read as "self".
func ReadCPUClock(pids map[string]int) CPUClock {
	c := CPUClock{Procs: map[string]time.Duration{}}
	all := map[string]int{"self": os.Getpid()}
	for label, pid := range pids {
		all[label] = pid
	}
	for label, pid := range all {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		if d, err := ParseStatCPU(string(b)); err == nil {
			c.Procs[label] = d
		}
	}
	if b, err := os.ReadFile("/proc/stat"); err == nil {
		line, _, _ := strings.Cut(string(b), "\n")
		f := strings.Fields(line) // cpu user nice system idle iowait irq softirq steal …
		for i, v := range f[1:] {
			n, _ := strconv.ParseInt(v, 10, 64)
			d := time.Duration(n) * clockTick
			if i < 8 {
				c.Machine.Total += d
				if i != 3 && i != 4 { // idle and iowait are not busy
					c.Machine.Busy += d
				}
			}
		}
	}
	return c
}

// Since is what was used from before to c.
func (c CPUClock) Since(before CPUClock) CPUClock {
	out := CPUClock{Procs: map[string]time.Duration{}}
	for k, v := range c.Procs {
		if b, ok := before.Procs[k]; ok {
			out.Procs[k] = v - b
		}
	}
	out.Machine.Busy = c.Machine.Busy - before.Machine.Busy
	out.Machine.Total = c.Machine.Total - before.Machine.Total
	return out
}
