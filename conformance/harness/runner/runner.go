// Package runner starts the project's binaries for tests, benchmarks and
// the demo, in one of two ways behind one interface: as real processes
// from a directory of built binaries (Process), or in this process by
// calling the same Main the binary's main calls (InProcess), as etcd's
// tests/framework runs one test body against either. It depends on
// neither Ginkgo nor the products, so the qemu guest suite and the bench
// commands use it as the Ginkgo suites do (through conformance/harness).
package runner

import (
	"context"
	"io"
	"os"
	"strings"
	"time"

	"github.com/pillarhq/pillar/impl/testing/lockedbuf"
)

// Runner starts a binary by name: "proxy", "sim", "pillar-agent", or a
// path to an executable.
type Runner interface {
	Start(name string, args []string, o Options) (*Proc, error)
}

// Options describe one start.
type Options struct {
	// Label names the process in reports; the binary's name by default.
	Label string
	// Env is added to the environment (see Process.InheritEnv).
	Env map[string]string
	// Secrets are replaced by [REDACTED] in Output.
	Secrets []string
	// Log, when set, receives the output instead of a memory buffer. A
	// process writes to it directly, not through a pipe, so it may outlive
	// the caller (make demo KEEP=1); Output reads the file back.
	Log *os.File
}

// TB is the part of testing.TB the runner needs: *testing.T, *testing.B
// and Ginkgo's GinkgoT() all provide it (testing.TB itself cannot be
// implemented outside package testing).
type TB interface {
	Helper()
	Cleanup(func())
	Fatalf(format string, args ...any)
	Logf(format string, args ...any)
	Failed() bool
}

// StartTB starts name for one test: a failed start fails the test, the
// binary is stopped when the test ends, and its output is logged only when
// the test failed.
func StartTB(tb TB, r Runner, name string, args []string, o Options) *Proc {
	tb.Helper()
	p, err := r.Start(name, args, o)
	if err != nil {
		tb.Fatalf("start %s: %v", name, err)
		return nil
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("\n----- output of %s -----\n%s\n", p.Name, p.Output())
		}
		p.Stop()
	})
	return p
}

// control is what differs between a process and an in-process Main.
type control interface {
	terminate()    // ask for a graceful stop (SIGTERM, or cancel)
	kill()         // stop at once (SIGKILL; in-process: cancel)
	exitCode() int // once done
}

// Proc is a running binary, whichever runner started it.
type Proc struct {
	Name    string
	out     *lockedbuf.Buffer
	log     *os.File
	secrets []string
	done    chan struct{}
	ctl     control
}

func newProc(name string, o Options) *Proc {
	p := &Proc{Name: name, secrets: o.Secrets, done: make(chan struct{}), log: o.Log}
	if o.Label != "" {
		p.Name = o.Label
	}
	if o.Log == nil {
		p.out = &lockedbuf.Buffer{}
	}
	return p
}

// writer is where the binary's output goes.
func (p *Proc) writer() io.Writer {
	if p.log != nil {
		return p.log
	}
	return p.out
}

// RawOutput is the output with nothing redacted, for checks that secrets
// never reach the logs.
func (p *Proc) RawOutput() string {
	if p.log != nil {
		b, _ := os.ReadFile(p.log.Name())
		return string(b)
	}
	return p.out.String()
}

// Output is the output so far, secrets redacted.
func (p *Proc) Output() string {
	s := p.RawOutput()
	for _, sec := range p.secrets {
		if sec != "" {
			s = strings.ReplaceAll(s, sec, "[REDACTED]")
		}
	}
	return s
}

// StopGrace is how long Stop waits after the graceful request.
const StopGrace = 15 * time.Second

// Stop asks for a graceful stop and waits; a process still running after
// StopGrace is killed.
func (p *Proc) Stop() {
	if p.Exited() {
		return
	}
	p.ctl.terminate()
	select {
	case <-p.done:
	case <-time.After(StopGrace):
		p.ctl.kill()
		<-p.done
	}
}

// Kill stops the binary at once. For a process it is a crash (SIGKILL);
// in-process it can only cancel Main's context, so specs that need a crash
// use the process runner.
func (p *Proc) Kill() {
	p.ctl.kill()
	<-p.done
}

// Terminate asks for a graceful stop and returns at once, for specs that
// watch the drain; Done reports the exit.
func (p *Proc) Terminate() { p.ctl.terminate() }

// Done is closed when the binary has ended.
func (p *Proc) Done() <-chan struct{} { return p.done }

// ExitCode is the exit status once the binary has ended.
func (p *Proc) ExitCode() int { <-p.done; return p.ctl.exitCode() }

// Exited reports whether the binary has ended.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// MainFunc is a binary's Main: it runs until ctx ends, reads its
// environment through getenv and writes its log to stderr
// (impl/gateway/server.Main's shape).
type MainFunc func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error
