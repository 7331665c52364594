package runner

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
)

// Process runs built binaries as real processes: the realism crash and
// restart specs need (SIGKILL, a process's own exit code and signals).
type Process struct {
	// Dir holds the binaries; a name with a slash is used as a path.
	Dir string
	// InheritEnv passes this process's whole environment (plus
	// Options.Env). By default a binary sees only PATH, HOME and
	// Options.Env, so nothing from the developer's shell changes a run.
	InheritEnv bool
}

var _ Runner = Process{}

// Path is where name's binary is.
func (r Process) Path(name string) string {
	if strings.Contains(name, "/") {
		return name
	}
	return filepath.Join(r.Dir, name)
}

// Start runs the binary; it ends when Stop, Kill or Terminate says so,
// or by itself.
func (r Process) Start(name string, args []string, o Options) (*Proc, error) {
	p := newProc(filepath.Base(name), o)
	cmd := exec.Command(r.Path(name), args...)
	if r.InheritEnv {
		cmd.Env = os.Environ()
	} else {
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}
	}
	for k, v := range o.Env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// An *os.File is handed to the child as its stdout and stderr; a
	// buffer is fed through a pipe.
	cmd.Stdout, cmd.Stderr = p.writer(), p.writer()
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	p.ctl = &process{cmd: cmd}
	go func() { _ = cmd.Wait(); close(p.done) }() // the exit status is read from cmd.ProcessState
	return p, nil
}

type process struct{ cmd *exec.Cmd }

func (c *process) terminate()    { _ = c.cmd.Process.Signal(syscall.SIGTERM) }
func (c *process) kill()         { _ = c.cmd.Process.Kill() }
func (c *process) exitCode() int { return c.cmd.ProcessState.ExitCode() }

// Pid is the process's id; 0 for a binary run in-process.
func (p *Proc) Pid() int {
	if c, ok := p.ctl.(*process); ok {
		return c.cmd.Process.Pid
	}
	return 0
}

// Release leaves a started process running after the caller exits (make
// demo KEEP=1); it must log to Options.Log, since a pipe would close.
func (p *Proc) Release() {
	if c, ok := p.ctl.(*process); ok {
		_ = c.cmd.Process.Release()
	}
}
