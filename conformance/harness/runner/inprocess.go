package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// InProcess runs a binary by calling its Main in a goroutine of this
// process: no fork and exec, one address space for the race detector and
// the debugger. Names (or paths whose file name is) missing from Mains go to Else (usually Process), so
// a suite can run in-process as far as the table reaches.
type InProcess struct {
	Mains map[string]MainFunc
	Else  Runner
}

var _ Runner = InProcess{}

// Start calls name's Main with a context that Stop, Kill and Terminate
// cancel. Like the binaries' main, a Main that returns an error prints
// "<name>: <error>" and exits with status 1.
func (r InProcess) Start(name string, args []string, o Options) (*Proc, error) {
	// A path to a built binary names the same Main as its file name.
	main, ok := r.Mains[filepath.Base(name)]
	if !ok {
		if r.Else == nil {
			return nil, fmt.Errorf("no in-process Main for %s", name)
		}
		return r.Else.Start(name, args, o)
	}
	p := newProc(filepath.Base(name), o)
	ctx, cancel := context.WithCancel(context.Background())
	c := &inProcess{cancel: cancel}
	p.ctl = c
	getenv := func(k string) string {
		if v, ok := o.Env[k]; ok {
			return v
		}
		// The same minimal environment as Process.
		if k == "PATH" || k == "HOME" {
			return os.Getenv(k)
		}
		return ""
	}
	w := p.writer()
	go func() {
		defer close(p.done)
		defer cancel()
		if err := main(ctx, args, getenv, w); err != nil {
			fmt.Fprintf(w, "%s: %v\n", filepath.Base(name), err)
			c.code = 1
		}
	}()
	return p, nil
}

type inProcess struct {
	cancel context.CancelFunc
	code   int // written before done is closed
}

func (c *inProcess) terminate()    { c.cancel() }
func (c *inProcess) kill()         { c.cancel() }
func (c *inProcess) exitCode() int { return c.code }
