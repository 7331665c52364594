package storagetools

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// StateEnv names the environment variable holding the state directory the
// multi-call binary works on.
const StateEnv = "FAKESTORAGE_STATE"

const mainUsage = `usage: fakestorage [--state DIR] COMMAND [ARGS...]

Simulated storage tools; state in DIR (default $FAKESTORAGE_STATE).
Run as zfs, zpool, lvcreate, lvextend, lvremove, lvs or vgs (through a
symlink, or as the first argument) to act as that tool. Setup commands:

  add-pool NAME SIZE            create a zpool (SIZE like 1G, 512M, bytes)
  add-dataset NAME              create a filesystem dataset and its parents
  remove-pool NAME              remove a pool and its datasets
  pool-health NAME HEALTH       ONLINE, DEGRADED, FAULTED, UNAVAIL, SUSPENDED
  add-vg NAME SIZE [EXTENT]     create a volume group (default extent 4M)
  add-thinpool VG NAME SIZE     create a thin pool in a volume group
  remove-vg NAME                remove a volume group and its volumes
  deny-devices on|off           fail every tool as an unprivileged container
  links DIR                     create tool symlinks to this binary in DIR
  device-root                   print the directory standing for /dev
  dump                          print the state as JSON
`

// Main runs the multi-call binary: args[0]'s base name picks the tool, or,
// when the binary runs under its own name, the first argument does.
// It returns the exit status.
func Main(args []string, getenv func(string) string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, mainUsage)
		return 2
	}
	self := args[0]
	cmd, rest := filepath.Base(self), args[1:]
	stateDir := getenv(StateEnv)
	if !isTool(cmd) {
		if len(rest) >= 2 && rest[0] == "--state" {
			stateDir, rest = rest[1], rest[2:]
		} else if len(rest) >= 1 && strings.HasPrefix(rest[0], "--state=") {
			stateDir, rest = strings.TrimPrefix(rest[0], "--state="), rest[1:]
		}
		if len(rest) == 0 || rest[0] == "-h" || rest[0] == "--help" || rest[0] == "help" {
			fmt.Fprint(stderr, mainUsage)
			return 2
		}
		cmd, rest = rest[0], rest[1:]
	}
	if cmd == "links" {
		return links(self, rest, stderr)
	}
	if stateDir == "" {
		fmt.Fprintf(stderr, "fakestorage: no state directory: set %s or pass --state DIR\n", StateEnv)
		return 2
	}
	h, err := Open(stateDir)
	if err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	if isTool(cmd) {
		return h.Run(cmd, rest, stdout, stderr)
	}
	if err := admin(h, cmd, rest, stdout); err != nil {
		fmt.Fprintf(stderr, "fakestorage %s: %v\n", cmd, err)
		return 1
	}
	return 0
}

func isTool(name string) bool {
	for _, t := range Tools {
		if t == name {
			return true
		}
	}
	return false
}

func admin(h *Host, cmd string, args []string, stdout io.Writer) error {
	need := func(n int) error {
		if len(args) < n {
			return fmt.Errorf("needs %d argument(s); see fakestorage --help", n)
		}
		return nil
	}
	size := func(s string) (int64, error) { return ParseSize(s) }
	switch cmd {
	case "add-pool":
		if err := need(2); err != nil {
			return err
		}
		n, err := size(args[1])
		if err != nil {
			return err
		}
		return h.CreatePool(args[0], n)
	case "add-dataset":
		if err := need(1); err != nil {
			return err
		}
		return h.CreateDataset(args[0])
	case "remove-pool":
		if err := need(1); err != nil {
			return err
		}
		return h.DestroyPool(args[0])
	case "pool-health":
		if err := need(2); err != nil {
			return err
		}
		return h.SetPoolHealth(args[0], args[1])
	case "add-vg":
		if err := need(2); err != nil {
			return err
		}
		n, err := size(args[1])
		if err != nil {
			return err
		}
		var ext int64
		if len(args) > 2 {
			if ext, err = size(args[2]); err != nil {
				return err
			}
		}
		return h.CreateVolumeGroup(args[0], n, ext)
	case "add-thinpool":
		if err := need(3); err != nil {
			return err
		}
		n, err := size(args[2])
		if err != nil {
			return err
		}
		return h.CreateThinPool(args[0], args[1], n)
	case "remove-vg":
		if err := need(1); err != nil {
			return err
		}
		return h.RemoveVolumeGroup(args[0])
	case "deny-devices":
		if err := need(1); err != nil {
			return err
		}
		switch args[0] {
		case "on":
			return h.SetDevicesDenied(true)
		case "off":
			return h.SetDevicesDenied(false)
		}
		return fmt.Errorf("want on or off, got %q", args[0])
	case "device-root":
		_, err := fmt.Fprintln(stdout, h.DeviceRoot())
		return err
	case "dump":
		return h.Dump(stdout)
	}
	return fmt.Errorf("unknown command; see fakestorage --help")
}

// links creates one symlink per tool in dir pointing at the running binary,
// so a PATH entry or a runner directory can stand in for /sbin.
func links(self string, args []string, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "fakestorage links: needs a directory")
		return 2
	}
	target, err := os.Executable()
	if err != nil {
		target, err = filepath.Abs(self)
	}
	if err != nil {
		fmt.Fprintf(stderr, "fakestorage links: %v\n", err)
		return 1
	}
	if err := os.MkdirAll(args[0], 0o755); err != nil {
		fmt.Fprintf(stderr, "fakestorage links: %v\n", err)
		return 1
	}
	for _, tool := range Tools {
		link := filepath.Join(args[0], tool)
		os.Remove(link)
		if err := os.Symlink(target, link); err != nil {
			fmt.Fprintf(stderr, "fakestorage links: %v\n", err)
			return 1
		}
	}
	return 0
}
