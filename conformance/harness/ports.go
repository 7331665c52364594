package harness

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"

	. "github.com/onsi/gomega"
)

// A binary a spec starts is told its listen address, so the port is chosen
// before the binary binds it. Between the two, anything else on the machine
// could bind it: a port the kernel picked for ":0" goes back to the pool
// when the probe closes, and the next ":0" listener or outgoing connection
// of any process (a suite running beside this one, another checkout's
// tests) may be given it. So ports come from below the kernel's ephemeral
// range, which it never hands out by itself, and a lock file per port,
// held until this process exits, keeps concurrent test processes apart.

var (
	portsMu sync.Mutex
	// held keeps the lock files open (and so locked) for the life of the
	// process; the ports are never handed out twice.
	held = map[int]*os.File{}
)

// FreeAddr returns a loopback address whose port nothing listens on, that
// no other FreeAddr of this or a concurrent test process returns, and that
// the kernel never gives a listener on ":0" or an outgoing connection.
func FreeAddr() string {
	addr, err := ListenAddr()
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return addr
}

// ListenAddr is FreeAddr for code outside a spec (the bench commands).
func ListenAddr() (string, error) {
	low, high, err := reservablePorts()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(os.TempDir(), "pillar-test-ports")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	portsMu.Lock()
	defer portsMu.Unlock()
	n := high - low
	start := rand.IntN(n)
	for i := range n {
		port := low + (start+i)%n
		if held[port] != nil {
			continue
		}
		f, ok, err := lockPort(dir, port)
		if err != nil {
			return "", err
		}
		if !ok {
			continue // another test process holds it
		}
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// A process that does not take part in the locking may listen there.
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			f.Close()
			continue
		}
		ln.Close()
		held[port] = f
		return addr, nil
	}
	return "", fmt.Errorf("no free port in %d-%d", low, high-1)
}

// lockPort takes the port's lock file without waiting; ok is false when
// another process holds it.
func lockPort(dir string, port int) (f *os.File, ok bool, err error) {
	f, err = os.OpenFile(filepath.Join(dir, strconv.Itoa(port)), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return nil, false, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("lock port %d: %w", port, err)
	}
	return f, true, nil
}

// ephemeralRange is where Linux keeps the ports it assigns by itself.
const ephemeralRange = "/proc/sys/net/ipv4/ip_local_port_range"

// reservablePorts is the range FreeAddr takes ports from: the 16384 ports
// (fewer when the ephemeral range starts lower) right below the ephemeral
// range, and above the privileged ones.
func reservablePorts() (low, high int, err error) {
	high = 32768 // Linux's default start of the range
	if b, err := os.ReadFile(ephemeralRange); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if v, err := strconv.Atoi(f[0]); err == nil {
				high = v
			}
		}
	}
	low = max(high-16384, 1024)
	if high-low < 1024 {
		return 0, 0, fmt.Errorf("the ephemeral port range starts at %d: too few ports below it to reserve (%s)", high, ephemeralRange)
	}
	return low, high, nil
}
