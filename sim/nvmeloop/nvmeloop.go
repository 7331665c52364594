// Package nvmeloop is the node's connector for simulated storage nodes: it
// "connects" to a subsystem of a simulated agent (pillar-agent --sim-root)
// by attaching the exported backing file as a loop device, so real mkfs,
// mount and resize run on a machine without NVMe/TCP. It follows the
// kernel target's rules that a host sees: the subsystem must exist and be
// linked to a port, its namespace enabled, and the host allowed (or
// allow_any_host on); otherwise Connect fails as `nvme connect` does.
package nvmeloop

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/pillarhq/pillar/sim/configfs"
)

// Loop connects to the subsystems of one simulated agent.
type Loop struct {
	// ConfigfsState is the agent's configfs.json; NvmetRoot its root.
	ConfigfsState, NvmetRoot string
	// StateDir keeps which backing file each connected subsystem uses.
	StateDir string

	mu sync.Mutex
}

// New returns a connector for the agent simulated in simRoot, keeping its
// own records in stateDir.
func New(simRoot, nvmetRoot, stateDir string) *Loop {
	return &Loop{ConfigfsState: filepath.Join(simRoot, "configfs.json"), NvmetRoot: nvmetRoot, StateDir: stateDir}
}

// ErrRefused is a connect the target refuses (unknown subsystem, host not
// allowed, namespace disabled, not linked to a port).
var ErrRefused = errors.New("target refused the connection")

func (l *Loop) records() (map[string]string, error) {
	m := map[string]string{}
	b, err := os.ReadFile(filepath.Join(l.StateDir, "loops.json"))
	if os.IsNotExist(err) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	return m, json.Unmarshal(b, &m)
}

func (l *Loop) save(m map[string]string) error {
	if err := os.MkdirAll(l.StateDir, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(m)
	tmp := filepath.Join(l.StateDir, ".loops.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.StateDir, "loops.json"))
}

// links are the port links each connected subsystem was reached through
// (configfs.FS.PortLinks), standing for the kernel's controllers.
func (l *Loop) links() (map[string]map[string]int64, error) {
	m := map[string]map[string]int64{}
	b, err := os.ReadFile(filepath.Join(l.StateDir, "links.json"))
	if os.IsNotExist(err) {
		return m, nil
	}
	if err != nil {
		return nil, err
	}
	return m, json.Unmarshal(b, &m)
}

func (l *Loop) saveLinks(m map[string]map[string]int64) error {
	if err := os.MkdirAll(l.StateDir, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(m)
	tmp := filepath.Join(l.StateDir, ".links.json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(l.StateDir, "links.json"))
}

// Reaches reports whether this host's connection to nqn still reaches the
// namespace, as the kernel decides: a controller lives as long as the port
// link it connected through, so once the target unlinked the subsystem
// (to fence this host, or to unexport) the connection reaches nothing,
// whatever the ACL says later. A subsystem not connected reaches nothing.
func (l *Loop) Reaches(nqn string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	links, err := l.links()
	if err != nil {
		return false, err
	}
	mine, ok := links[nqn]
	if !ok {
		return false, nil
	}
	fs, err := configfs.Open(l.NvmetRoot, l.ConfigfsState)
	if err != nil {
		return false, err
	}
	for port, seq := range fs.PortLinks(nqn) {
		if got, ok := mine[port]; ok && got == seq {
			return true, nil
		}
	}
	return false, nil
}

// connected records the port links a connect went through.
func (l *Loop) connected(nqn string) error {
	fs, err := configfs.Open(l.NvmetRoot, l.ConfigfsState)
	if err != nil {
		return err
	}
	links, err := l.links()
	if err != nil {
		return err
	}
	links[nqn] = fs.PortLinks(nqn)
	return l.saveLinks(links)
}

// backing finds what the target exports for nqn to hostNQN.
func (l *Loop) backing(nqn, hostNQN string) (string, error) {
	if _, err := os.Stat(l.ConfigfsState); err != nil {
		return "", fmt.Errorf("no simulated target at %s: %w", l.ConfigfsState, err)
	}
	fs, err := configfs.Open(l.NvmetRoot, l.ConfigfsState)
	if err != nil {
		return "", err
	}
	sub := filepath.Join(l.NvmetRoot, "subsystems", nqn)
	if !fs.Exists(sub) {
		return "", fmt.Errorf("subsystem %s: %w (no such subsystem)", nqn, ErrRefused)
	}
	linked := false
	ports, _ := fs.ReadDir(filepath.Join(l.NvmetRoot, "ports"))
	for _, p := range ports {
		if fs.Exists(filepath.Join(l.NvmetRoot, "ports", p, "subsystems", nqn)) {
			linked = true
		}
	}
	if !linked {
		return "", fmt.Errorf("subsystem %s is not reachable through any port: %w", nqn, ErrRefused)
	}
	if any, _ := fs.ReadFile(filepath.Join(sub, "attr_allow_any_host")); any != "1" && !fs.Exists(filepath.Join(sub, "allowed_hosts", hostNQN)) {
		return "", fmt.Errorf("host %s is not allowed on %s: %w", hostNQN, nqn, ErrRefused)
	}
	ns := filepath.Join(sub, "namespaces", "1")
	if on, _ := fs.ReadFile(filepath.Join(ns, "enable")); on != "1" {
		return "", fmt.Errorf("namespace of %s is not enabled: %w", nqn, ErrRefused)
	}
	return fs.ReadFile(filepath.Join(ns, "device_path"))
}

// loopsOf lists the loop devices backed by file.
func loopsOf(file string) []string {
	var out []string
	devs, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, d := range devs {
		b, err := os.ReadFile(d)
		if err != nil {
			continue
		}
		got := strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)")
		if got == file {
			out = append(out, "/dev/"+filepath.Base(filepath.Dir(filepath.Dir(d))))
		}
	}
	return out
}

func losetup(ctx context.Context, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, "losetup", args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("losetup %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return strings.TrimSpace(string(out)), nil
}

// attach binds file to a free loop device. In a container whose /dev is a
// private tmpfs (a kind node, a pod with /dev from such a node) the kernel
// makes new loop devices without their nodes appearing there, so losetup
// -f --show fails: ask for the free device, make its node when it is
// missing, then bind; another process may take the same device between
// the two calls, hence the retries.
func attach(ctx context.Context, file string) (string, error) {
	var last error
	for range 5 {
		dev, err := losetup(ctx, "-f")
		if err != nil {
			return "", err
		}
		if err := ensureLoopNode(dev); err != nil {
			return "", err
		}
		if _, err := losetup(ctx, dev, file); err != nil {
			last = err
			continue
		}
		return dev, nil
	}
	return "", last
}

// ensureLoopNode makes /dev/loopN (block 7:N) when it does not exist.
func ensureLoopNode(dev string) error {
	if _, err := os.Stat(dev); err == nil {
		return nil
	}
	n, err := strconv.Atoi(strings.TrimPrefix(dev, "/dev/loop"))
	if err != nil {
		return fmt.Errorf("losetup -f printed %q", dev)
	}
	if err := unix.Mknod(dev, unix.S_IFBLK|0o660, int(unix.Mkdev(7, uint32(n)))); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("make %s: %w", dev, err)
	}
	return nil
}

// Connect attaches the exported backing file (or finds it attached).
func (l *Loop) Connect(ctx context.Context, nqn, hostNQN string) (string, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	file, err := l.backing(nqn, hostNQN)
	if err != nil {
		return "", err
	}
	recs, err := l.records()
	if err != nil {
		return "", err
	}
	if err := l.connected(nqn); err != nil {
		return "", err
	}
	if devs := loopsOf(file); len(devs) > 0 {
		recs[nqn] = file
		return devs[0], l.save(recs)
	}
	dev, err := attach(ctx, file)
	if err != nil {
		return "", err
	}
	recs[nqn] = file
	return dev, l.save(recs)
}

// Connected reports whether a loop device stands for the subsystem.
func (l *Loop) Connected(_ context.Context, nqn string) (bool, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs, err := l.records()
	if err != nil {
		return false, err
	}
	file, ok := recs[nqn]
	return ok && len(loopsOf(file)) > 0, nil
}

// Disconnect detaches the subsystem's loop devices.
func (l *Loop) Disconnect(ctx context.Context, nqn string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs, err := l.records()
	if err != nil {
		return err
	}
	file, ok := recs[nqn]
	if !ok {
		return nil
	}
	for _, d := range loopsOf(file) {
		if _, err := losetup(ctx, "-d", d); err != nil {
			return err
		}
	}
	delete(recs, nqn)
	if err := l.save(recs); err != nil {
		return err
	}
	links, err := l.links()
	if err != nil {
		return err
	}
	delete(links, nqn)
	return l.saveLinks(links)
}

// Rescan has the loop devices pick up their backing file's new size.
func (l *Loop) Rescan(ctx context.Context, nqn string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	recs, err := l.records()
	if err != nil {
		return err
	}
	for _, d := range loopsOf(recs[nqn]) {
		if _, err := losetup(ctx, "-c", d); err != nil {
			return err
		}
	}
	return nil
}
