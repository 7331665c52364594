package harness

import (
	"io"
	"net"
	"sync"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
)

// Link is a TCP forwarder on loopback that a spec can cut and heal: cut
// resets every open connection and refuses new ones, as a network partition
// between a replica and its database would; heal accepts again.
type Link struct {
	Addr string // where clients connect
	to   string

	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	ln    net.Listener
}

// StartLink forwards a fresh loopback port to target ("host:port") until the
// spec ends.
func StartLink(target string) *Link {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	l := &Link{Addr: ln.Addr().String(), to: target, conns: map[net.Conn]struct{}{}, ln: ln}
	go l.serve()
	DeferCleanup(func() { ln.Close(); l.Cut() })
	return l
}

func (l *Link) serve() {
	for {
		c, err := l.ln.Accept()
		if err != nil {
			return
		}
		l.mu.Lock()
		refused := l.cut
		if !refused {
			l.conns[c] = struct{}{}
		}
		l.mu.Unlock()
		if refused {
			reset(c)
			continue
		}
		go l.pipe(c)
	}
}

func (l *Link) pipe(c net.Conn) {
	up, err := net.Dial("tcp", l.to)
	if err != nil {
		l.drop(c)
		return
	}
	l.mu.Lock()
	if l.cut {
		l.mu.Unlock()
		reset(c)
		up.Close()
		return
	}
	l.conns[up] = struct{}{}
	l.mu.Unlock()
	done := make(chan struct{}, 2)
	// Either side ending, cleanly or not, ends the link.
	go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
	<-done
	l.drop(c)
	l.drop(up)
}

func (l *Link) drop(c net.Conn) {
	l.mu.Lock()
	delete(l.conns, c)
	l.mu.Unlock()
	c.Close()
}

// Cut resets every connection through the link and refuses new ones.
func (l *Link) Cut() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cut = true
	for c := range l.conns {
		reset(c)
		delete(l.conns, c)
	}
}

// Heal lets connections through again.
func (l *Link) Heal() {
	l.mu.Lock()
	l.cut = false
	l.mu.Unlock()
}

// reset closes with RST, not FIN, so the peer sees a broken connection.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0) // on a closed socket there is nothing left to reset
	}
	c.Close()
}
