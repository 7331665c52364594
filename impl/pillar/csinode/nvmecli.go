package csinode

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// NVMeCLI connects with nvme-cli over NVMe/TCP (production).
type NVMeCLI struct {
	// SysRoot stands for /sys ("/sys" when empty).
	SysRoot string
	// Wait bounds the wait for the namespace's block device (30 s).
	Wait time.Duration
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
		if _, err := run(ctx, "nvme", args...); err != nil {
			return "", err
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

// Disconnect disconnects every controller of the subsystem.
func (n *NVMeCLI) Disconnect(ctx context.Context, nqn string) error {
	if len(n.controllers(nqn)) == 0 {
		return nil
	}
	_, err := run(ctx, "nvme", "disconnect", "-n", nqn)
	return err
}

// Rescan has every controller of the subsystem rescan its namespaces.
func (n *NVMeCLI) Rescan(ctx context.Context, nqn string) error {
	for _, c := range n.controllers(nqn) {
		if _, err := run(ctx, "nvme", "ns-rescan", "/dev/"+c); err != nil {
			return err
		}
	}
	return nil
}

// HostNQN reads the host NQN nvme-cli uses from file; when the file does
// not exist it writes a new uuid-based one there, so nvme-cli and the
// driver agree.
func HostNQN(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err == nil {
		if nqn := strings.TrimSpace(string(b)); strings.HasPrefix(nqn, "nqn.") {
			return nqn, nil
		}
		return "", fmt.Errorf("%s does not hold an NQN", file)
	}
	if !os.IsNotExist(err) {
		return "", err
	}
	u := make([]byte, 16)
	if _, err := rand.Read(u); err != nil {
		return "", err
	}
	u[6] = (u[6] & 0x0f) | 0x40
	u[8] = (u[8] & 0x3f) | 0x80
	nqn := fmt.Sprintf("nqn.2014-08.org.nvmexpress:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
		return "", err
	}
	return nqn, os.WriteFile(file, []byte(nqn+"\n"), 0o644)
}
