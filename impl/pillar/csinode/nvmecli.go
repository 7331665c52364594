package csinode

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// NVMeCLI connects with nvme-cli over NVMe/TCP (production).
type NVMeCLI struct {
	// SysRoot stands for /sys ("/sys" when empty).
	SysRoot string
	// Wait bounds the wait for the namespace's block device (30 s).
	Wait time.Duration
	// Exec runs a command and returns its combined output (nil: the
	// system's).
	Exec func(ctx context.Context, name string, args ...string) (string, error)
}

func (n *NVMeCLI) exec(ctx context.Context, name string, args ...string) (string, error) {
	if n.Exec != nil {
		return n.Exec(ctx, name, args...)
	}
	return run(ctx, name, args...)
}

func (n *NVMeCLI) sys(p ...string) string {
	root := n.SysRoot
	if root == "" {
		root = "/sys"
	}
	return filepath.Join(append([]string{root}, p...)...)
}

var headRE = regexp.MustCompile(`^nvme\d+n\d+$`)

// deviceByID finds the head block device of a namespace by its uuid (or
// nguid). With native multipath, the hidden path devices nvmeXcYnZ carry
// the same ids; only the head device nvmeXnY is usable.
func (n *NVMeCLI) deviceByID(uuid, nguid string) string {
	blocks, _ := os.ReadDir(n.sys("block"))
	for _, b := range blocks {
		if !headRE.MatchString(b.Name()) {
			continue
		}
		if uuid != "" {
			if got, err := os.ReadFile(n.sys("block", b.Name(), "uuid")); err == nil && strings.TrimSpace(string(got)) == uuid {
				return "/dev/" + b.Name()
			}
		}
		if nguid != "" {
			if got, err := os.ReadFile(n.sys("block", b.Name(), "nguid")); err == nil && strings.EqualFold(strings.TrimSpace(string(got)), strings.ReplaceAll(nguid, "-", "")) {
				return "/dev/" + b.Name()
			}
		}
	}
	return ""
}

// controllers lists the fabrics controllers (nvmeN) connected to nqn.
func (n *NVMeCLI) controllers(nqn string) []string {
	var out []string
	ctls, _ := os.ReadDir(n.sys("class", "nvme-fabrics", "ctl"))
	for _, c := range ctls {
		if got, err := os.ReadFile(n.sys("class", "nvme-fabrics", "ctl", c.Name(), "subsysnqn")); err == nil && strings.TrimSpace(string(got)) == nqn {
			out = append(out, c.Name())
		}
	}
	return out
}

func run(ctx context.Context, name string, args ...string) (string, error) {
	out, err := exec.CommandContext(ctx, name, args...).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return string(out), nil
}

// Connect runs `nvme connect` unless the subsystem is already connected,
// then waits for the namespace's device.
func (n *NVMeCLI) Connect(ctx context.Context, t Target) (string, error) {
	if t.UUID == "" && t.NGUID == "" {
		return "", fmt.Errorf("publish context has no namespace uuid or nguid")
	}
	if dev := n.deviceByID(t.UUID, t.NGUID); dev != "" {
		return dev, nil
	}
	if len(n.controllers(t.NQN)) == 0 {
		args := []string{"connect", "-t", t.Transport, "-a", t.Address, "-s", t.Port, "-n", t.NQN}
		if t.HostNQN != "" {
			args = append(args, "--hostnqn", t.HostNQN)
		}
		if t.HostID != "" {
			args = append(args, "--hostid", t.HostID)
		}
		if r := t.Reconnect; r.LossTimeoutSeconds != 0 {
			args = append(args, "--ctrl-loss-tmo", strconv.Itoa(r.LossTimeoutSeconds))
		}
		if r := t.Reconnect; r.DelaySeconds != 0 {
			args = append(args, "--reconnect-delay", strconv.Itoa(r.DelaySeconds))
		}
		if r := t.Reconnect; r.KeepAliveSeconds != 0 {
			args = append(args, "--keep-alive-tmo", strconv.Itoa(r.KeepAliveSeconds))
		}
		if _, err := n.exec(ctx, "nvme", args...); err != nil {
			return "", err
		}
		// fast_io_fail_tmo is set on the controller the connect made, not
		// passed to nvme connect: nvme-cli before 2.4 (Debian 12 ships 2.3)
		// has no option for it, while the kernel's attribute is writable
		// since Linux 5.10. Until it is written the kernel's default (off)
		// holds, a moment after connecting.
		if r := t.Reconnect; r.FastIOFailSeconds != 0 {
			if err := n.setFastIOFail(t.NQN, r.FastIOFailSeconds); err != nil {
				return "", err
			}
		}
	}
	wait := n.Wait
	if wait == 0 {
		wait = 30 * time.Second
	}
	deadline := time.Now().Add(wait)
	for {
		if dev := n.deviceByID(t.UUID, t.NGUID); dev != "" {
			return dev, nil
		}
		if time.Now().After(deadline) {
			return "", fmt.Errorf("connected to %s but no namespace with uuid %s appeared within %s", t.NQN, t.UUID, wait)
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// setFastIOFail writes fast_io_fail_tmo (-1: off) on every controller of
// the subsystem.
func (n *NVMeCLI) setFastIOFail(nqn string, seconds int) error {
	ctls := n.controllers(nqn)
	if len(ctls) == 0 {
		return fmt.Errorf("connected to %s but found no controller to set fast_io_fail_tmo on", nqn)
	}
	for _, c := range ctls {
		f := n.sys("class", "nvme", c, "fast_io_fail_tmo")
		if err := os.WriteFile(f, []byte(strconv.Itoa(seconds)), 0o644); err != nil {
			return fmt.Errorf("set fast_io_fail_tmo of %s (%s): %w", c, nqn, err)
		}
	}
	return nil
}

// Connected reports whether a controller of the subsystem exists.
func (n *NVMeCLI) Connected(_ context.Context, nqn string) (bool, error) {
	return len(n.controllers(nqn)) > 0, nil
}

// Disconnect disconnects every controller of the subsystem.
func (n *NVMeCLI) Disconnect(ctx context.Context, nqn string) error {
	if len(n.controllers(nqn)) == 0 {
		return nil
	}
	_, err := n.exec(ctx, "nvme", "disconnect", "-n", nqn)
	return err
}

// Rescan has every controller of the subsystem rescan its namespaces.
func (n *NVMeCLI) Rescan(ctx context.Context, nqn string) error {
	for _, c := range n.controllers(nqn) {
		if _, err := n.exec(ctx, "nvme", "ns-rescan", "/dev/"+c); err != nil {
			return err
		}
	}
	return nil
}

// Identity is the host's NVMe identity: its host NQN and host ID, the
// pair nvme-cli reads from /etc/nvme/hostnqn and /etc/nvme/hostid.
type Identity struct{ NQN, ID string }

// HostIdentity reads the host's identity from nqnFile and idFile, writing
// what is missing: a new uuid-based NQN
// (nqn.2014-08.org.nvmexpress:uuid:<uuid>) and a host ID equal to that
// uuid, as `nvme gen-hostnqn` and nvme-cli 2 expect. The files live on the
// host (the chart mounts its /etc/nvme), so each node keeps one identity
// across restarts and every node has its own.
func HostIdentity(nqnFile, idFile string) (Identity, error) {
	var id Identity
	b, err := os.ReadFile(nqnFile)
	switch {
	case err == nil:
		if id.NQN = strings.TrimSpace(string(b)); !strings.HasPrefix(id.NQN, "nqn.") {
			return id, fmt.Errorf("%s does not hold an NQN", nqnFile)
		}
		if id.NQN == zeroNQN {
			return id, fmt.Errorf("%s holds the all-zero NQN %s (nvme gen-hostnqn on a machine whose DMI product UUID is zero): "+
				"every such node would share one identity and read each other's volumes; "+
				"remove the file so the node writes a random one, or write a unique NQN", nqnFile, zeroNQN)
		}
	case os.IsNotExist(err):
		u, err := newUUID()
		if err != nil {
			return id, err
		}
		id.NQN = uuidNQNPrefix + u
		if err := writeNew(nqnFile, id.NQN); err != nil {
			return id, err
		}
	default:
		return id, err
	}
	if idFile == "" {
		return id, nil
	}
	b, err = os.ReadFile(idFile)
	switch {
	case err == nil:
		id.ID = strings.TrimSpace(string(b))
		if !uuidRE.MatchString(id.ID) {
			return id, fmt.Errorf("%s does not hold a host ID (a uuid)", idFile)
		}
		return id, nil
	case os.IsNotExist(err):
		if u, ok := strings.CutPrefix(id.NQN, uuidNQNPrefix); ok && uuidRE.MatchString(u) {
			id.ID = u
		} else if id.ID, err = newUUID(); err != nil {
			return id, err
		}
		return id, writeNew(idFile, id.ID)
	}
	return id, err
}

const uuidNQNPrefix = "nqn.2014-08.org.nvmexpress:uuid:"

// zeroNQN is what `nvme gen-hostnqn` derives from a zero DMI product UUID
// (some hypervisors and boards): a shared, not a host's, identity.
const zeroNQN = uuidNQNPrefix + "00000000-0000-0000-0000-000000000000"

var uuidRE = regexp.MustCompile(`^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$`)

func newUUID() (string, error) {
	u := make([]byte, 16)
	if _, err := rand.Read(u); err != nil {
		return "", err
	}
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]), nil
}

// writeNew writes a file that did not exist, refusing to overwrite one
// another process wrote meanwhile.
func writeNew(file, v string) error {
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return err
	}
	f, err := os.OpenFile(file, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(v + "\n"); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// HostNQN is HostIdentity's NQN alone (no host ID file).
func HostNQN(file string) (string, error) {
	id, err := HostIdentity(file, "")
	return id.NQN, err
}
