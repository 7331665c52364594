package harness

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A port ListenAddr returned is never the kernel's choice for a listener on
// ":0" (this process's here, any process's in a run), so a binary told to
// listen there finds it free; and it is returned once.
func TestListenAddrIsNotTheKernelsChoice(t *testing.T) {
	given := map[string]bool{}
	for range 50 {
		addr, err := ListenAddr()
		if err != nil {
			t.Fatal(err)
		}
		if given[addr] {
			t.Fatalf("%s returned twice", addr)
		}
		given[addr] = true
		// What other suites and checkouts do meanwhile.
		for range 100 {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			got := ln.Addr().String()
			ln.Close()
			if given[got] {
				t.Fatalf("the kernel gave %s, which ListenAddr returned, to a listener on :0", got)
			}
		}
	}
}

// Another test process cannot take a port ListenAddr returned: the port's
// lock is held until this process exits (a second open file description
// stands for the other process, flock treats both alike).
func TestListenAddrLocksThePortForOtherProcesses(t *testing.T) {
	addr, err := ListenAddr()
	if err != nil {
		t.Fatal(err)
	}
	_, p, _ := net.SplitHostPort(addr)
	port, _ := strconv.Atoi(p)
	low, high, err := reservablePorts()
	if err != nil || port < low || port >= high {
		t.Fatalf("port %d outside %d-%d (%v)", port, low, high, err)
	}
	f, ok, err := lockPort(filepath.Join(os.TempDir(), "pillar-test-ports"), port)
	if err != nil || ok {
		t.Fatalf("a second locker took port %d (ok %v, err %v)", port, ok, err)
	}
	if f != nil {
		f.Close()
	}
}
