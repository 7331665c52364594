// Package nvmet exports volumes over NVMe/TCP through the Linux kernel's
// NVMe-oF target, configured through configfs (/sys/kernel/config/nvmet):
// one subsystem per volume with one namespace (the volume's block device,
// a stable UUID and NGUID derived from the volume id), access by explicit
// host NQN (never allow_any_host), and one TCP port the subsystems are
// linked to. Every operation is idempotent, and the exporter's view is
// read back from configfs, so exports survive agent restarts.
package nvmet

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// FS is the part of a file system the exporter uses. OSFS is configfs on
// the host; sim/configfs is a faithful fake with the kernel's rules.
type FS interface {
	Mkdir(path string) error
	Rmdir(path string) error
	WriteFile(path, value string) error
	ReadFile(path string) (string, error)
	Symlink(target, link string) error
	Remove(link string) error
	ReadDir(path string) ([]string, error)
	Exists(path string) bool
}

// OSFS is the host's file system.
type OSFS struct{}

func (OSFS) Mkdir(p string) error { return os.Mkdir(p, 0o755) }
func (OSFS) Rmdir(p string) error { return os.Remove(p) }
func (OSFS) WriteFile(p, v string) error {
	return os.WriteFile(p, []byte(v), 0o644)
}
func (OSFS) ReadFile(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}
func (OSFS) Symlink(t, l string) error { return os.Symlink(t, l) }
func (OSFS) Remove(l string) error     { return os.Remove(l) }
func (OSFS) ReadDir(p string) ([]string, error) {
	es, err := os.ReadDir(p)
	var out []string
	for _, e := range es {
		out = append(out, e.Name())
	}
	return out, err
}
func (OSFS) Exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// DefaultRoot is where the kernel mounts the target's configfs tree.
const DefaultRoot = "/sys/kernel/config/nvmet"

// NQNPrefix names the subsystems of this driver.
const NQNPrefix = "nqn.2026-11.io.pillarhq.pillar-csi:volume:"

// Port is the TCP port subsystems are reachable on.
type Port struct {
	ID      int    // configfs port id
	Address string // traddr
	Service int    // trsvcid (4420 is NVMe/TCP's)
	Family  string // ipv4 or ipv6
}

// Exporter configures the target.
type Exporter struct {
	FS   FS
	Root string
	Port Port
}

// Target is how a host reaches an exported volume.
type Target struct {
	VolumeID string
	NQN      string
	UUID     string
	NGUID    string
	Device   string
	Address  string
	Service  int
	Hosts    []string
}

// ExportID is the id a volume of a pool is exported under: pool and name
// joined by ':' (volume names never hold ':', and volume names are unique
// only within a pool). The agent exports with it and the node derives the
// NQN from it.
func ExportID(pool, name string) string { return pool + ":" + name }

// NQN is the subsystem NQN of a volume.
func NQN(volumeID string) string { return NQNPrefix + volumeID }

// IDs are the stable namespace identifiers of a volume: a UUID (RFC 4122
// variant, version 5 layout) and an NGUID, both from SHA-256 of its id, so
// a re-export after a restart presents the same device identity.
func IDs(volumeID string) (uuid, nguid string) {
	h := sha256.Sum256([]byte("pillar-csi/namespace/" + volumeID))
	u := h[:16]
	u[6] = (u[6] & 0x0f) | 0x50
	u[8] = (u[8] & 0x3f) | 0x80
	x := hex.EncodeToString(u)
	uuid = x[:8] + "-" + x[8:12] + "-" + x[12:16] + "-" + x[16:20] + "-" + x[20:32]
	n := hex.EncodeToString(h[16:32])
	nguid = n[:8] + "-" + n[8:12] + "-" + n[12:16] + "-" + n[16:20] + "-" + n[20:32]
	return uuid, nguid
}

func (e *Exporter) p(parts ...string) string {
	return filepath.Join(append([]string{e.Root}, parts...)...)
}

func (e *Exporter) portDir() string { return e.p("ports", fmt.Sprint(e.Port.ID)) }

// ErrPortConflict: the port exists with another address while in use.
var ErrPortConflict = errors.New("nvmet port is configured with another address and is in use")

// ensurePort creates the port, or checks that an existing one matches.
func (e *Exporter) ensurePort() error {
	dir := e.portDir()
	want := map[string]string{"addr_trtype": "tcp", "addr_adrfam": e.Port.Family, "addr_traddr": e.Port.Address,
		"addr_trsvcid": fmt.Sprint(e.Port.Service)}
	if !e.FS.Exists(dir) {
		if err := e.FS.Mkdir(dir); err != nil {
			return fmt.Errorf("create port %d: %w", e.Port.ID, err)
		}
	}
	same := true
	for _, k := range []string{"addr_trtype", "addr_adrfam", "addr_traddr", "addr_trsvcid"} {
		if v, _ := e.FS.ReadFile(filepath.Join(dir, k)); v != want[k] {
			same = false
		}
	}
	if same {
		return nil
	}
	if links, _ := e.FS.ReadDir(filepath.Join(dir, "subsystems")); len(links) > 0 {
		return ErrPortConflict
	}
	for _, k := range []string{"addr_trtype", "addr_adrfam", "addr_traddr", "addr_trsvcid"} {
		if err := e.FS.WriteFile(filepath.Join(dir, k), want[k]); err != nil {
			return fmt.Errorf("port %d %s: %w", e.Port.ID, k, err)
		}
	}
	return nil
}

// Export makes a volume's block device reachable as its own subsystem.
// Exporting an exported volume with the same device is a no-op.
func (e *Exporter) Export(volumeID, device string) (*Target, error) {
	nqn := NQN(volumeID)
	sub := e.p("subsystems", nqn)
	ns := filepath.Join(sub, "namespaces", "1")
	uuid, nguid := IDs(volumeID)
	if !e.FS.Exists(sub) {
		if err := e.FS.Mkdir(sub); err != nil {
			return nil, fmt.Errorf("create subsystem: %w", err)
		}
	}
	if v, _ := e.FS.ReadFile(filepath.Join(sub, "attr_allow_any_host")); v != "0" {
		if err := e.FS.WriteFile(filepath.Join(sub, "attr_allow_any_host"), "0"); err != nil {
			return nil, fmt.Errorf("restrict hosts: %w", err)
		}
	}
	if !e.FS.Exists(ns) {
		if err := e.FS.Mkdir(ns); err != nil {
			return nil, fmt.Errorf("create namespace: %w", err)
		}
	}
	if on, _ := e.FS.ReadFile(filepath.Join(ns, "enable")); on == "1" {
		if cur, _ := e.FS.ReadFile(filepath.Join(ns, "device_path")); cur != device {
			return nil, fmt.Errorf("volume %s is exported from %s, not %s", volumeID, cur, device)
		}
	} else {
		// Identity and device can only be written while disabled.
		for _, kv := range [][2]string{{"device_path", device}, {"device_uuid", uuid}, {"device_nguid", nguid}} {
			if err := e.FS.WriteFile(filepath.Join(ns, kv[0]), kv[1]); err != nil {
				return nil, fmt.Errorf("namespace %s: %w", kv[0], err)
			}
		}
		if err := e.FS.WriteFile(filepath.Join(ns, "enable"), "1"); err != nil {
			return nil, fmt.Errorf("enable namespace: %w", err)
		}
	}
	if err := e.ensurePort(); err != nil {
		return nil, err
	}
	link := filepath.Join(e.portDir(), "subsystems", nqn)
	if !e.FS.Exists(link) {
		if err := e.FS.Symlink(sub, link); err != nil {
			return nil, fmt.Errorf("link subsystem to port: %w", err)
		}
	}
	return e.target(volumeID)
}

// Revalidate tells the target a volume's device grew, so connected hosts
// see the new size (kernels before 5.12 lack the attribute; there the
// size is picked up when the namespace is next enabled). A volume that is
// not exported is left alone.
func (e *Exporter) Revalidate(volumeID string) error {
	ns := e.p("subsystems", NQN(volumeID), "namespaces", "1")
	if on, _ := e.FS.ReadFile(filepath.Join(ns, "enable")); on != "1" {
		return nil
	}
	attr := filepath.Join(ns, "revalidate_size")
	if !e.FS.Exists(attr) {
		return nil
	}
	if err := e.FS.WriteFile(attr, "1"); err != nil {
		return fmt.Errorf("revalidate namespace size: %w", err)
	}
	return nil
}

// Get is one exported volume's target, or fs.ErrNotExist.
func (e *Exporter) Get(volumeID string) (*Target, error) {
	if !e.FS.Exists(e.p("subsystems", NQN(volumeID))) {
		return nil, fs.ErrNotExist
	}
	return e.target(volumeID)
}

// AllowHost lets a host NQN connect to a volume's subsystem.
func (e *Exporter) AllowHost(volumeID, hostNQN string) error {
	sub := e.p("subsystems", NQN(volumeID))
	if !e.FS.Exists(sub) {
		return fs.ErrNotExist
	}
	host := e.p("hosts", hostNQN)
	if !e.FS.Exists(host) {
		if err := e.FS.Mkdir(host); err != nil {
			return fmt.Errorf("create host: %w", err)
		}
	}
	link := filepath.Join(sub, "allowed_hosts", hostNQN)
	if e.FS.Exists(link) {
		return nil
	}
	if err := e.FS.Symlink(host, link); err != nil {
		return fmt.Errorf("allow host: %w", err)
	}
	return nil
}

// DenyHost removes a host's access and fences it: the kernel checks the
// ACL only when a host connects, so a host already connected would keep
// reading and writing the namespace. Unlinking the subsystem from the port
// makes the kernel delete every controller of the subsystem on that port;
// linking it back lets the hosts still allowed reconnect (their kernels do
// so on their own, retrying the I/O), while the denied host is refused.
// The steps are ordered so that a retry after a crash between any two of
// them completes the fence: the port link is removed before the host, and
// a host already gone only has the port link restored.
func (e *Exporter) DenyHost(volumeID, hostNQN string) error {
	nqn := NQN(volumeID)
	sub := e.p("subsystems", nqn)
	if !e.FS.Exists(sub) {
		return nil
	}
	link := filepath.Join(sub, "allowed_hosts", hostNQN)
	portLink := filepath.Join(e.portDir(), "subsystems", nqn)
	if e.FS.Exists(link) {
		if e.FS.Exists(portLink) {
			if err := e.FS.Remove(portLink); err != nil {
				return fmt.Errorf("unlink from port to fence host %s: %w", hostNQN, err)
			}
		}
		if err := e.FS.Remove(link); err != nil {
			return fmt.Errorf("deny host: %w", err)
		}
	}
	if !e.FS.Exists(portLink) {
		if err := e.ensurePort(); err != nil {
			return err
		}
		if err := e.FS.Symlink(sub, portLink); err != nil {
			return fmt.Errorf("link subsystem to port again: %w", err)
		}
	}
	return nil
}

// Unexport removes a volume's subsystem; unexporting twice is a no-op.
func (e *Exporter) Unexport(volumeID string) error {
	nqn := NQN(volumeID)
	sub := e.p("subsystems", nqn)
	if !e.FS.Exists(sub) {
		return nil
	}
	ports, _ := e.FS.ReadDir(e.p("ports"))
	for _, port := range ports {
		link := e.p("ports", port, "subsystems", nqn)
		if e.FS.Exists(link) {
			if err := e.FS.Remove(link); err != nil {
				return fmt.Errorf("unlink from port %s: %w", port, err)
			}
		}
	}
	hosts, _ := e.FS.ReadDir(filepath.Join(sub, "allowed_hosts"))
	for _, h := range hosts {
		if err := e.FS.Remove(filepath.Join(sub, "allowed_hosts", h)); err != nil {
			return fmt.Errorf("remove host %s: %w", h, err)
		}
	}
	nss, _ := e.FS.ReadDir(filepath.Join(sub, "namespaces"))
	for _, n := range nss {
		dir := filepath.Join(sub, "namespaces", n)
		if err := e.FS.WriteFile(filepath.Join(dir, "enable"), "0"); err != nil {
			return fmt.Errorf("disable namespace: %w", err)
		}
		if err := e.FS.Rmdir(dir); err != nil {
			return fmt.Errorf("remove namespace: %w", err)
		}
	}
	return e.FS.Rmdir(sub)
}

func (e *Exporter) target(volumeID string) (*Target, error) {
	nqn := NQN(volumeID)
	sub := e.p("subsystems", nqn)
	ns := filepath.Join(sub, "namespaces", "1")
	t := &Target{VolumeID: volumeID, NQN: nqn, Address: e.Port.Address, Service: e.Port.Service}
	t.Device, _ = e.FS.ReadFile(filepath.Join(ns, "device_path"))
	t.UUID, _ = e.FS.ReadFile(filepath.Join(ns, "device_uuid"))
	t.NGUID, _ = e.FS.ReadFile(filepath.Join(ns, "device_nguid"))
	hosts, _ := e.FS.ReadDir(filepath.Join(sub, "allowed_hosts"))
	sort.Strings(hosts)
	t.Hosts = hosts
	return t, nil
}

// List rebuilds the exporter's view from configfs: every subsystem of
// this driver, with its device, identity and allowed hosts.
func (e *Exporter) List() ([]Target, error) {
	subs, err := e.FS.ReadDir(e.p("subsystems"))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	var out []Target
	for _, s := range subs {
		id, ok := strings.CutPrefix(s, NQNPrefix)
		if !ok {
			continue // not ours
		}
		t, err := e.target(id)
		if err != nil {
			return nil, err
		}
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].VolumeID < out[j].VolumeID })
	return out, nil
}
