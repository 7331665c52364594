// Command streams measures one bin/proxy carrying many concurrent SSE
// streams (issue 22, part 3): every stream complete, the time to first
// event added over the same streams sent straight to the simulator, the
// proxy's CPU per relayed event, its resident memory per open stream, and
// no goroutine or descriptor left behind once the streams end.
//
// It starts bin/sim and bin/proxy (fresh SQLite) from --bin-dir through the
// conformance runner, writes a markdown section to --out and exits non-zero
// only when something fails (a start, or any stream not complete).
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/pillarhq/pillar/conformance/bench"
)

// Targets of issue 22.
const targetKB = 64

func main() { bench.Main("streams", run) }

type params struct {
	n          int           // concurrent streams
	hold       time.Duration // how long each stream pauses after its first event
	few, many  int           // words per stream in the two CPU runs
	warmup     int
	binDir     string
	out        string
	tolG, tolF int
}

func run(ctx context.Context, args []string) error {
	var p params
	fs := flag.NewFlagSet("streams", flag.ContinueOnError)
	fs.IntVar(&p.n, "n", 2000, "concurrent streams")
	fs.DurationVar(&p.hold, "hold", 10*time.Second, "pause of every stream after its first event: long enough to open all of them")
	fs.IntVar(&p.few, "few", 1, "words (delta events) per stream in the short CPU run")
	fs.IntVar(&p.many, "many", 100, "words per stream in the long CPU run")
	fs.IntVar(&p.warmup, "warmup", 100, "concurrent streams sent through the proxy before the idle sample")
	fs.IntVar(&p.tolG, "tolerance-goroutines", 10, "goroutines the proxy may have more after the streams than before")
	fs.IntVar(&p.tolF, "tolerance-fds", 4, "descriptors likewise")
	fs.StringVar(&p.binDir, "bin-dir", "bin", "directory of bin/proxy and bin/sim")
	fs.StringVar(&p.out, "out", "", "write the markdown section here")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if p.n <= 0 || p.few <= 0 || p.many <= p.few {
		return fmt.Errorf("need --n > 0 and --many > --few > 0")
	}
	// Every stream holds a descriptor here, two in the proxy and one in the
	// simulator, which inherit this limit.
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err == nil && lim.Cur < lim.Max {
		lim.Cur = lim.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
	}
	if need := uint64(2*p.n + 256); lim.Cur < need {
		return fmt.Errorf("descriptor limit %d is below the %d the proxy needs for %d streams (raise ulimit -n)", lim.Cur, need, p.n)
	}
	dir, err := os.MkdirTemp("", "streams.")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	st := bench.NewStack(p.binDir, dir)
	defer st.Stop()
	s, err := start(st)
	if err != nil {
		return err
	}
	r, err := measure(ctx, s, p, bench.Logf)
	if err != nil {
		return err
	}
	return bench.Emit(r.markdown(p), p.out)
}

type stack struct {
	st    *bench.Stack
	sim   *bench.Sim
	proxy *bench.Proxy
}

func start(st *bench.Stack) (*stack, error) {
	sim, err := st.StartSim()
	if err != nil {
		return nil, err
	}
	px, err := st.StartProxy(bench.ProxyOptions{Upstream: sim.VendorUpstream()})
	if err != nil {
		return nil, err
	}
	return &stack{st: st, sim: sim, proxy: px}, nil
}

// sample reads the proxy's /proc figures and its goroutine count.
func (s *stack) sample() (bench.ProcSample, error) {
	ps, err := bench.ReadProc(s.proxy.Proc.Pid())
	if err != nil {
		return ps, err
	}
	return ps, bench.AddRuntime(&ps, s.proxy.AdminURL+"/metrics", s.proxy.Admin.Token)
}

type results struct {
	n                        int
	events                   int
	direct, proxied          []time.Duration // time to first event
	clean, idle, open, after bench.ProcSample
	perEvent                 time.Duration
	perStreamFew             time.Duration // proxy CPU per short stream
	fewEvents, manyEvts      int
	leaks                    []string
}

func body(words int) string {
	return fmt.Sprintf(`{"model":"claude-sonnet-4-5","max_tokens":%d,"stream":true,"messages":[{"role":"user","content":%q}]}`,
		words, strings.TrimSpace(strings.Repeat("word ", words)))
}

// client opens a new connection per concurrent stream and keeps none idle
// beyond the run (CloseIdleConnections before the leak sample).
func client() *http.Client {
	return &http.Client{Transport: &http.Transport{
		MaxIdleConnsPerHost: 4096, MaxIdleConns: 8192, IdleConnTimeout: time.Minute, DisableCompression: true,
		DialContext: (&net.Dialer{Timeout: 30 * time.Second}).DialContext,
	}}
}

// burst sends n streams at once and returns each one's time to first
// event. Every stream must be a 200 ending in message_stop with want
// events (0: any); opened counts first events as they arrive.
func burst(ctx context.Context, c *http.Client, url, key, fault, reqBody string, n, want int, opened, done *atomic.Int64) ([]time.Duration, int, error) {
	ttfe := make([]time.Duration, n)
	events := make([]int, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer done.Add(1)
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/messages", strings.NewReader(reqBody))
			if err != nil {
				errs[i] = err
				return
			}
			req.Header.Set("Content-Type", "application/json")
			req.Header.Set("Anthropic-Version", "2023-06-01")
			req.Header.Set("X-Api-Key", key)
			if fault != "" {
				req.Header.Set("X-Sim-Fault", fault)
			}
			t0 := time.Now()
			res, err := c.Do(req)
			if err != nil {
				errs[i] = err
				return
			}
			defer res.Body.Close()
			if res.StatusCode != http.StatusOK {
				errs[i] = fmt.Errorf("status %d", res.StatusCode)
				return
			}
			r, err := bench.ReadSSE(res.Body, nil, func() { ttfe[i] = time.Since(t0); opened.Add(1) })
			switch {
			case err != nil:
				errs[i] = err
			case !r.Stopped || r.Errored:
				errs[i] = fmt.Errorf("stream incomplete after %d events (message_stop %v, error event %v)", r.Events, r.Stopped, r.Errored)
			case want > 0 && r.Events != want:
				errs[i] = fmt.Errorf("%d events, want %d", r.Events, want)
			}
			events[i] = r.Events
		}()
	}
	wg.Wait()
	bad := 0
	var first error
	for _, e := range errs {
		if e != nil {
			bad++
			if first == nil {
				first = e
			}
		}
	}
	if bad > 0 {
		return nil, 0, fmt.Errorf("%d of %d streams to %s failed; first: %w", bad, n, url, first)
	}
	return ttfe, events[0], nil
}

func measure(ctx context.Context, s *stack, p params, logf func(string, ...any)) (*results, error) {
	r := &results{n: p.n}
	c := client()
	defer c.CloseIdleConnections()
	fault := fmt.Sprintf("first_event_delay_ms=%d", p.hold.Milliseconds())
	var opened, done atomic.Int64

	logf("warm-up: %d concurrent streams through the proxy", p.warmup)
	if _, _, err := burst(ctx, c, s.proxy.URL, s.proxy.Key, "", body(p.few), p.warmup, 0, &opened, &done); err != nil {
		return nil, err
	}
	c.CloseIdleConnections()
	// The leak check's baseline: the proxy warm (what its first requests
	// start lazily is running) but holding no pooled upstream connection,
	// which a restart of the simulator closes.
	if err := s.sim.Restart(s.st); err != nil {
		return nil, err
	}
	var err error
	var prev bench.ProcSample
	stable := func(ps bench.ProcSample) bool {
		same := ps.Goroutines == prev.Goroutines && ps.FDs == prev.FDs
		prev = ps
		return same
	}
	if r.clean, err = s.settled(stable); err != nil {
		return nil, err
	}
	r.idle = r.clean

	// held runs n streams that pause after their first event, samples the
	// proxy once all n are open, and checks none had ended by then.
	held := func(url, key string, sampleProxy bool) ([]time.Duration, error) {
		opened.Store(0)
		done.Store(0)
		var ttfe []time.Duration
		var berr error
		fin := make(chan struct{})
		go func() {
			defer close(fin)
			ttfe, r.events, berr = burst(ctx, c, url, key, fault, body(p.few), p.n, 0, &opened, &done)
		}()
		for opened.Load() < int64(p.n) {
			select {
			case <-fin:
				return nil, fmt.Errorf("streams ended before all %d were open (%d were): %v", p.n, opened.Load(), berr)
			case <-time.After(20 * time.Millisecond):
			}
		}
		if sampleProxy {
			o, err := s.sample()
			if err != nil {
				return nil, err
			}
			if done.Load() > 0 {
				return nil, fmt.Errorf("%d streams had ended before the sample: raise --hold above %v", done.Load(), p.hold)
			}
			r.open = o
		}
		<-fin
		c.CloseIdleConnections()
		return ttfe, berr
	}
	logf("%d concurrent streams straight to the simulator, each pausing %v after its first event", p.n, p.hold)
	if r.direct, err = held(s.sim.URL, s.sim.Key, false); err != nil {
		return nil, fmt.Errorf("direct: %w", err)
	}
	logf("%d concurrent streams through the proxy, likewise; sampling the proxy while all are open", p.n)
	if r.proxied, err = held(s.proxy.URL, s.proxy.Key, true); err != nil {
		return nil, fmt.Errorf("proxied: %w", err)
	}

	// The relay's CPU per event: the same n streams twice, with few and
	// with many events each, no pause.
	cpuRun := func(words int) (time.Duration, int, error) {
		before, err := bench.ReadProc(s.proxy.Proc.Pid())
		if err != nil {
			return 0, 0, err
		}
		_, ev, err := burst(ctx, c, s.proxy.URL, s.proxy.Key, "", body(words), p.n, 0, &opened, &done)
		if err != nil {
			return 0, 0, err
		}
		c.CloseIdleConnections()
		after, err := bench.ReadProc(s.proxy.Proc.Pid())
		return after.CPU - before.CPU, ev, err
	}
	logf("CPU per event: %d streams of %d and of %d words through the proxy", p.n, p.few, p.many)
	cpuFew, evFew, err := cpuRun(p.few)
	if err != nil {
		return nil, err
	}
	cpuMany, evMany, err := cpuRun(p.many)
	if err != nil {
		return nil, err
	}
	r.fewEvents, r.manyEvts = evFew, evMany
	r.perStreamFew = cpuFew / time.Duration(p.n)
	if r.perEvent, err = bench.MarginalCost(cpuFew/time.Duration(p.n), cpuMany/time.Duration(p.n), evFew, evMany); err != nil {
		return nil, err
	}

	// The proxy keeps idle connections to the simulator (its transport's
	// pool): stopping the simulator closes them, so what remains after is
	// what the streams left behind.
	logf("leak check: stopping the simulator, then sampling the proxy")
	s.sim.Proc.Stop()
	if r.after, err = s.settled(func(ps bench.ProcSample) bool { return len(bench.Leaks(r.clean, ps, p.tolG, p.tolF)) == 0 }); err != nil {
		return nil, err
	}
	r.leaks = bench.Leaks(r.clean, r.after, p.tolG, p.tolF)
	return r, nil
}

// settled samples the proxy until ok or 5 s have passed (closed
// connections take a moment to be noticed), and returns the last sample.
func (s *stack) settled(ok func(bench.ProcSample) bool) (bench.ProcSample, error) {
	deadline := time.Now().Add(5 * time.Second)
	for {
		ps, err := s.sample()
		if err != nil || ok(ps) || time.Now().After(deadline) {
			return ps, err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (r *results) markdown(p params) string {
	d99, p99 := bench.Percentile(r.direct, .99), bench.Percentile(r.proxied, .99)
	d50, p50 := bench.Percentile(r.direct, .50), bench.Percentile(r.proxied, .50)
	kb := bench.PerStreamKB(r.idle.RSSKB, r.open.RSSKB, r.n)
	leak := "none"
	if len(r.leaks) > 0 {
		leak = "**" + strings.Join(r.leaks, "; ") + "**"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "\n## %d concurrent SSE streams through one proxy\n\n", r.n)
	fmt.Fprintf(&b, "| metric | figure | target | |\n|---|---:|---|---|\n")
	fmt.Fprintf(&b, "| streams complete (200, every event, message_stop), each run | %d of %d | all | met |\n", r.n, r.n)
	fmt.Fprintf(&b, "| time to first event p50: direct / proxied | %.1f / %.1f ms | | |\n", bench.Ms(d50), bench.Ms(p50))
	fmt.Fprintf(&b, "| time to first event p99: direct / proxied | %.1f / %.1f ms | | |\n", bench.Ms(d99), bench.Ms(p99))
	fmt.Fprintf(&b, "| added time to first event p99 (proxied − direct) | %.1f ms | reported | |\n", bench.Ms(p99-d99))
	fmt.Fprintf(&b, "| proxy CPU per relayed event (marginal) | %.2f µs | reported | |\n", float64(r.perEvent.Nanoseconds())/1000)
	fmt.Fprintf(&b, "| proxy CPU per %d-event stream | %.0f µs | reported | |\n", r.fewEvents, float64(r.perStreamFew.Nanoseconds())/1000)
	fmt.Fprintf(&b, "| proxy RSS per open stream | %.1f KB | < %d KB | %s |\n", kb, targetKB, bench.MetMark(kb < targetKB))
	fmt.Fprintf(&b, "| proxy goroutines: before / all open / after | %d / %d / %d | no leak | %s |\n", r.clean.Goroutines, r.open.Goroutines, r.after.Goroutines, bench.MetMark(len(r.leaks) == 0))
	fmt.Fprintf(&b, "| proxy descriptors: before / all open / after | %d / %d / %d | no leak | %s |\n", r.clean.FDs, r.open.FDs, r.after.FDs, bench.MetMark(len(r.leaks) == 0))
	fmt.Fprintf(&b, "| proxy RSS: idle / all open / after | %d / %d / %d KB | | |\n", r.idle.RSSKB, r.open.RSSKB, r.after.RSSKB)
	fmt.Fprintf(&b, "| of which per open stream: Go heap in use / goroutine stacks | %.1f / %.1f KB | | |\n",
		bench.PerStreamKB(r.idle.HeapKB, r.open.HeapKB, r.n), bench.PerStreamKB(r.idle.StackKB, r.open.StackKB, r.n))
	fmt.Fprintf(&b, "\nLeaks: %s.\n", leak)
	fmt.Fprintf(&b, "\n%d streams held %v after a warm-up of %d; CPU runs of %d and %d events a stream (method: the section's notes).\n",
		r.n, p.hold, p.warmup, r.fewEvents, r.manyEvts)
	return b.String()
}
