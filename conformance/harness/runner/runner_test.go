package runner

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

// go test ./conformance/... passes -bin-dir to every suite.
var _ = flag.String("bin-dir", "", "unused here")

// The test binary doubles as the process runner's binary: with
// RUNNER_HELPER set it acts as a small daemon instead of running tests.
func TestMain(m *testing.M) {
	switch os.Getenv("RUNNER_HELPER") {
	case "serve":
		fmt.Println("ready secret-123 HOME=" + os.Getenv("HOME") + " LEAK=" + os.Getenv("RUNNER_LEAK"))
		time.Sleep(time.Hour) // a daemon: until a signal ends it
	case "fail":
		fmt.Fprintln(os.Stderr, "bad flag")
		os.Exit(3)
	}
	os.Exit(m.Run())
}

func self(t *testing.T) string {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return exe
}

func waitOutput(t *testing.T, p *Proc, want string) {
	t.Helper()
	// No clock: the helper prints before it blocks, so the output is
	// complete once the pipe has delivered it; Done would end the loop on
	// an early exit.
	for !strings.Contains(p.RawOutput(), want) {
		select {
		case <-p.Done():
			if !strings.Contains(p.RawOutput(), want) {
				t.Fatalf("exited without %q: %s", want, p.RawOutput())
			}
		default:
			runtime.Gosched()
		}
	}
}

func TestProcessRedactsSecretsAndKeepsTheEnvironmentMinimal(t *testing.T) {
	t.Setenv("RUNNER_LEAK", "from-the-shell")
	p, err := Process{Dir: filepath.Dir(self(t))}.Start(filepath.Base(self(t)), nil,
		Options{Label: "helper", Env: map[string]string{"RUNNER_HELPER": "serve"}, Secrets: []string{"secret-123"}})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p, "ready")
	if p.Name != "helper" {
		t.Errorf("Name = %q, want the label", p.Name)
	}
	if got := p.Output(); !strings.Contains(got, "ready [REDACTED]") || strings.Contains(got, "secret-123") {
		t.Errorf("Output = %q, want the secret redacted", got)
	}
	if !strings.Contains(p.RawOutput(), "secret-123") || !strings.Contains(p.RawOutput(), "HOME="+os.Getenv("HOME")) {
		t.Errorf("RawOutput = %q", p.RawOutput())
	}
	if strings.Contains(p.RawOutput(), "LEAK=from-the-shell") {
		t.Errorf("the shell's environment reached the binary: %q", p.RawOutput())
	}
	p.Stop()
	if !p.Exited() || p.ExitCode() != -1 { // ended by SIGTERM
		t.Errorf("after Stop: exited %v, code %d", p.Exited(), p.ExitCode())
	}
}

func TestProcessInheritEnvAndLogFile(t *testing.T) {
	t.Setenv("RUNNER_LEAK", "from-the-shell")
	log, err := os.Create(filepath.Join(t.TempDir(), "helper.log"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := Process{InheritEnv: true}.Start(self(t), nil, Options{Env: map[string]string{"RUNNER_HELPER": "serve"}, Log: log})
	if err != nil {
		t.Fatal(err)
	}
	waitOutput(t, p, "ready")
	p.Kill()
	b, _ := os.ReadFile(log.Name())
	if !strings.Contains(string(b), "LEAK=from-the-shell") {
		t.Errorf("log file = %q, want the inherited environment", b)
	}
}

func TestProcessExitCode(t *testing.T) {
	p, err := Process{}.Start(self(t), nil, Options{Env: map[string]string{"RUNNER_HELPER": "fail"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.ExitCode() != 3 || !strings.Contains(p.Output(), "bad flag") {
		t.Errorf("code %d, output %q", p.ExitCode(), p.Output())
	}
	p.Stop() // a no-op once ended
}

func TestProcessMissingBinary(t *testing.T) {
	if _, err := (Process{Dir: t.TempDir()}).Start("nope", nil, Options{}); err == nil {
		t.Fatal("started a binary that does not exist")
	}
}

func TestInProcessRunsMainUntilStopped(t *testing.T) {
	started := make(chan struct{})
	var gotEnv [3]string
	serve := func(ctx context.Context, args []string, getenv func(string) string, stderr io.Writer) error {
		gotEnv = [3]string{getenv("TOKEN"), getenv("HOME"), getenv("RUNNER_LEAK")}
		fmt.Fprintln(stderr, "serving", strings.Join(args, " "), "secret-123")
		close(started)
		<-ctx.Done()
		return nil
	}
	t.Setenv("RUNNER_LEAK", "from-the-shell")
	r := InProcess{Mains: map[string]MainFunc{"proxy": serve}}
	p, err := r.Start("/some/bin/proxy", []string{"--a"}, Options{Env: map[string]string{"TOKEN": "t"}, Secrets: []string{"secret-123"}})
	if err != nil {
		t.Fatal(err)
	}
	<-started
	if p.Name != "proxy" || p.Exited() {
		t.Fatalf("name %q exited %v", p.Name, p.Exited())
	}
	if gotEnv != [3]string{"t", os.Getenv("HOME"), ""} {
		t.Errorf("getenv saw %q, want Env plus PATH and HOME only", gotEnv)
	}
	if p.Output() != "serving --a [REDACTED]\n" {
		t.Errorf("Output = %q", p.Output())
	}
	p.Terminate()
	<-p.Done()
	if p.ExitCode() != 0 {
		t.Errorf("exit code %d after a clean return", p.ExitCode())
	}
}

func TestInProcessErrorIsExitStatusOne(t *testing.T) {
	fail := func(context.Context, []string, func(string) string, io.Writer) error {
		return errors.New("--listen: bad")
	}
	p, err := InProcess{Mains: map[string]MainFunc{"sim": fail}}.Start("sim", nil, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if p.ExitCode() != 1 || p.Output() != "sim: --listen: bad\n" {
		t.Errorf("code %d, output %q", p.ExitCode(), p.Output())
	}
}

func TestInProcessFallsBackForBinariesWithoutMain(t *testing.T) {
	p, err := InProcess{Else: Process{}}.Start(self(t), nil, Options{Env: map[string]string{"RUNNER_HELPER": "fail"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.ExitCode() != 3 {
		t.Errorf("the fallback did not run the binary: code %d", p.ExitCode())
	}
	if _, err := (InProcess{}).Start("pillar-agent", nil, Options{}); err == nil {
		t.Error("no Main and no fallback should be an error")
	}
}

// fakeTB records what StartTB asks of a test.
type fakeTB struct {
	failed   bool
	cleanups []func()
	logs     []string
	fatal    string
}

func (f *fakeTB) Helper()                        {}
func (f *fakeTB) Cleanup(fn func())              { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Fatalf(format string, a ...any) { f.fatal = fmt.Sprintf(format, a...) }
func (f *fakeTB) Logf(format string, a ...any)   { f.logs = append(f.logs, fmt.Sprintf(format, a...)) }
func (f *fakeTB) Failed() bool                   { return f.failed }

var _ TB = (*testing.T)(nil)

func TestStartTBStopsAndLogsOnlyOnFailure(t *testing.T) {
	for _, failed := range []bool{false, true} {
		said := make(chan struct{})
		serve := func(ctx context.Context, _ []string, _ func(string) string, stderr io.Writer) error {
			fmt.Fprintln(stderr, "hello")
			close(said)
			<-ctx.Done()
			return nil
		}
		tb := &fakeTB{}
		p := StartTB(tb, InProcess{Mains: map[string]MainFunc{"sim": serve}}, "sim", nil, Options{})
		<-said
		tb.failed = failed
		for _, c := range tb.cleanups {
			c()
		}
		if !p.Exited() {
			t.Errorf("failed=%v: the cleanup did not stop the binary", failed)
		}
		if logged := len(tb.logs) == 1 && strings.Contains(tb.logs[0], "hello"); logged != failed {
			t.Errorf("failed=%v: logs %q", failed, tb.logs)
		}
	}
	tb := &fakeTB{}
	if p := StartTB(tb, InProcess{}, "nope", nil, Options{}); p != nil || !strings.Contains(tb.fatal, "nope") {
		t.Errorf("a failed start: proc %v, fatal %q", p, tb.fatal)
	}
}
