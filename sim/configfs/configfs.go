// Package configfs is a faithful in-memory stand-in for the kernel NVMe-oF
// target's configfs tree (/sys/kernel/config/nvmet), for tests and
// simulated agents. It enforces the kernel's rules: groups appear only
// where the kernel allows mkdir, each comes with its fixed attributes
// (nothing else can be created), a namespace's device and identity cannot
// change while it is enabled, hosts may only be linked while
// allow_any_host is off (and allow_any_host cannot be turned on while
// hosts are linked), a port's address cannot change while subsystems are
// linked to it and a subsystem cannot be linked to a port without a
// transport, and groups with children or links cannot be removed.
// Errors are *fs.PathError with the errno the kernel returns.
package configfs

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
)

type node struct {
	Dir   bool   `json:"dir,omitempty"`
	Value string `json:"value,omitempty"`
	Link  string `json:"link,omitempty"` // symlink target, when a link
	Kind  string `json:"kind,omitempty"` // subsystem, namespace, port, host, or "" for plain
	// Seq numbers the links of subsystems into ports in the order they
	// were made: a host's controller lives as long as the link it came
	// through (PortLinks).
	Seq int64 `json:"seq,omitempty"`
}

// FS is the fake tree rooted at Root.
type FS struct {
	Root string
	// DeviceExists, when set, decides which device paths a namespace may
	// be enabled with (instead of the devices added with AddDevice), e.g.
	// "the backing file exists" for a simulated storage node.
	DeviceExists func(path string) bool

	mu      sync.Mutex
	nodes   map[string]*node
	devices map[string]bool
	// state, when set, is the file the tree is saved to after every change,
	// standing for the kernel keeping configfs across agent restarts.
	state string
}

// New returns a tree with the top-level groups the kernel creates.
func New(root string) *FS {
	f := &FS{Root: path.Clean(root), nodes: map[string]*node{}, devices: map[string]bool{}}
	f.nodes[f.Root] = &node{Dir: true}
	for _, d := range []string{"hosts", "ports", "subsystems"} {
		f.nodes[path.Join(f.Root, d)] = &node{Dir: true}
	}
	return f
}

// Open returns a tree kept in the file state: loaded from it when it
// exists, saved to it (atomically) after every change.
func Open(root, state string) (*FS, error) {
	f := New(root)
	f.state = state
	b, err := os.ReadFile(state)
	if os.IsNotExist(err) {
		return f, f.save()
	}
	if err != nil {
		return nil, err
	}
	var saved struct {
		Root  string           `json:"root"`
		Nodes map[string]*node `json:"nodes"`
	}
	if err := json.Unmarshal(b, &saved); err != nil {
		return nil, fmt.Errorf("configfs state %s: %w", state, err)
	}
	if saved.Root != f.Root {
		return nil, fmt.Errorf("configfs state %s is rooted at %s, not %s", state, saved.Root, f.Root)
	}
	f.nodes = saved.Nodes
	return f, nil
}

// save writes the tree to the state file, when there is one; called with
// mu held after a successful change.
func (f *FS) save() error {
	if f.state == "" {
		return nil
	}
	b, err := json.Marshal(struct {
		Root  string           `json:"root"`
		Nodes map[string]*node `json:"nodes"`
	}{f.Root, f.nodes})
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.state), ".configfs-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), f.state)
}

func (f *FS) deviceOK(p string) bool {
	if p == "" {
		return false
	}
	if f.DeviceExists != nil {
		return f.DeviceExists(p)
	}
	return f.devices[p]
}

// AddDevice registers a block device path namespaces may use.
func (f *FS) AddDevice(p string) {
	f.mu.Lock()
	f.devices[p] = true
	f.mu.Unlock()
}

func perr(op, p string, errno syscall.Errno) error { return &fs.PathError{Op: op, Path: p, Err: errno} }

// rel splits p relative to the root: ["subsystems", nqn, ...].
func (f *FS) rel(p string) []string {
	p = path.Clean(p)
	r := strings.TrimPrefix(p, f.Root)
	r = strings.Trim(r, "/")
	if r == "" {
		return nil
	}
	return strings.Split(r, "/")
}

func (f *FS) addDir(p, kind string, attrs map[string]string, subdirs ...string) {
	f.nodes[p] = &node{Dir: true, Kind: kind}
	for k, v := range attrs {
		f.nodes[path.Join(p, k)] = &node{Value: v}
	}
	for _, s := range subdirs {
		f.nodes[path.Join(p, s)] = &node{Dir: true}
	}
}

// Mkdir creates a group where the kernel allows one.
func (f *FS) Mkdir(p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p = path.Clean(p)
	if _, ok := f.nodes[p]; ok {
		return perr("mkdir", p, syscall.EEXIST)
	}
	if parent, ok := f.nodes[path.Dir(p)]; !ok || !parent.Dir {
		return perr("mkdir", p, syscall.ENOENT)
	}
	r := f.rel(p)
	switch {
	case len(r) == 2 && r[0] == "subsystems":
		f.addDir(p, "subsystem", map[string]string{"attr_allow_any_host": "1", "attr_serial": "0000000000000000",
			"attr_model": "Linux", "attr_version": "1.3"}, "namespaces", "allowed_hosts")
	case len(r) == 4 && r[0] == "subsystems" && r[2] == "namespaces":
		f.addDir(p, "namespace", map[string]string{"device_path": "", "device_uuid": "", "device_nguid": "", "enable": "0", "revalidate_size": "0"})
	case len(r) == 2 && r[0] == "ports":
		f.addDir(p, "port", map[string]string{"addr_trtype": "", "addr_adrfam": "", "addr_traddr": "", "addr_trsvcid": "", "addr_treq": "not specified"}, "subsystems")
	case len(r) == 2 && r[0] == "hosts":
		f.addDir(p, "host", nil)
	default:
		return perr("mkdir", p, syscall.EPERM)
	}
	return f.save()
}

func (f *FS) children(p string) []string {
	var out []string
	prefix := p + "/"
	for k := range f.nodes {
		if strings.HasPrefix(k, prefix) && !strings.Contains(k[len(prefix):], "/") {
			out = append(out, k[len(prefix):])
		}
	}
	sort.Strings(out)
	return out
}

// linkedFrom reports whether any symlink points at p.
func (f *FS) linkedFrom(p string) bool {
	for _, n := range f.nodes {
		if n.Link == p {
			return true
		}
	}
	return false
}

// Rmdir removes a group with no child groups and no links.
func (f *FS) Rmdir(p string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p = path.Clean(p)
	n, ok := f.nodes[p]
	if !ok {
		return perr("rmdir", p, syscall.ENOENT)
	}
	if !n.Dir || n.Kind == "" {
		return perr("rmdir", p, syscall.EPERM)
	}
	for _, c := range f.children(p) {
		cn := f.nodes[path.Join(p, c)]
		if cn.Dir && len(f.children(path.Join(p, c))) > 0 {
			return perr("rmdir", p, syscall.ENOTEMPTY)
		}
	}
	if f.linkedFrom(p) {
		return perr("rmdir", p, syscall.EBUSY)
	}
	for k := range f.nodes {
		if k == p || strings.HasPrefix(k, p+"/") {
			delete(f.nodes, k)
		}
	}
	return f.save()
}

// WriteFile sets an existing attribute.
func (f *FS) WriteFile(p, value string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	p = path.Clean(p)
	n, ok := f.nodes[p]
	if !ok {
		return perr("write", p, syscall.ENOENT)
	}
	if n.Dir || n.Link != "" {
		return perr("write", p, syscall.EISDIR)
	}
	value = strings.TrimSpace(value)
	dir, attr := path.Dir(p), path.Base(p)
	parent := f.nodes[dir]
	switch parent.Kind {
	case "namespace":
		enabled := f.nodes[path.Join(dir, "enable")].Value == "1"
		switch attr {
		case "device_path", "device_uuid", "device_nguid":
			if enabled {
				return perr("write", p, syscall.EBUSY)
			}
		case "revalidate_size":
			// The kernel re-reads the device size only of an enabled
			// namespace, and refuses anything but a true value.
			if !enabled || (value != "1" && value != "y" && value != "Y") {
				return perr("write", p, syscall.EINVAL)
			}
			return f.save()
		case "enable":
			if value != "0" && value != "1" {
				return perr("write", p, syscall.EINVAL)
			}
			if value == "1" && !enabled {
				dev := f.nodes[path.Join(dir, "device_path")].Value
				if !f.deviceOK(dev) {
					return perr("write", p, syscall.ENOENT)
				}
			}
		}
	case "subsystem":
		if attr == "attr_allow_any_host" {
			if value != "0" && value != "1" {
				return perr("write", p, syscall.EINVAL)
			}
			if value == "1" && len(f.children(path.Join(dir, "allowed_hosts"))) > 0 {
				return perr("write", p, syscall.EINVAL)
			}
		}
	case "port":
		if strings.HasPrefix(attr, "addr_") && len(f.children(path.Join(dir, "subsystems"))) > 0 {
			return perr("write", p, syscall.EACCES)
		}
		if attr == "addr_trtype" && value != "tcp" && value != "rdma" && value != "loop" && value != "fc" {
			return perr("write", p, syscall.EINVAL)
		}
		if attr == "addr_adrfam" && value != "ipv4" && value != "ipv6" && value != "ib" && value != "fc" {
			return perr("write", p, syscall.EINVAL)
		}
	}
	n.Value = value
	return f.save()
}

// ReadFile reads an attribute.
func (f *FS) ReadFile(p string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[path.Clean(p)]
	if !ok {
		return "", perr("read", p, syscall.ENOENT)
	}
	if n.Dir {
		return "", perr("read", p, syscall.EISDIR)
	}
	return n.Value, nil
}

// Symlink links a host into a subsystem's allowed_hosts, or a subsystem
// into a port's subsystems.
func (f *FS) Symlink(target, link string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	target, link = path.Clean(target), path.Clean(link)
	if _, ok := f.nodes[link]; ok {
		return perr("symlink", link, syscall.EEXIST)
	}
	t, ok := f.nodes[target]
	if !ok {
		return perr("symlink", link, syscall.ENOENT)
	}
	r := f.rel(link)
	switch {
	case len(r) == 4 && r[0] == "subsystems" && r[2] == "allowed_hosts":
		if t.Kind != "host" || path.Base(target) != r[3] {
			return perr("symlink", link, syscall.EINVAL)
		}
		if f.nodes[path.Join(f.Root, "subsystems", r[1], "attr_allow_any_host")].Value == "1" {
			return perr("symlink", link, syscall.EINVAL)
		}
	case len(r) == 4 && r[0] == "ports" && r[2] == "subsystems":
		if t.Kind != "subsystem" || path.Base(target) != r[3] {
			return perr("symlink", link, syscall.EINVAL)
		}
		if f.nodes[path.Join(f.Root, "ports", r[1], "addr_trtype")].Value == "" {
			return perr("symlink", link, syscall.EINVAL)
		}
	default:
		return perr("symlink", link, syscall.EPERM)
	}
	if _, ok := f.nodes[path.Dir(link)]; !ok {
		return perr("symlink", link, syscall.ENOENT)
	}
	n := &node{Link: target}
	if r[0] == "ports" {
		// The root keeps the last number given, so a link made again
		// never gets the number of the one it replaces.
		root := f.nodes[f.Root]
		for _, o := range f.nodes {
			root.Seq = max(root.Seq, o.Seq)
		}
		root.Seq++
		n.Seq = root.Seq
	}
	f.nodes[link] = n
	return f.save()
}

// PortLinks names, by port, the link through which a subsystem is
// reachable now. The kernel deletes a subsystem's controllers on a port
// when the link is removed, so a host connected through a link that is
// gone (or was made again: another number) reaches nothing any more, even
// when it is still allowed and the link is back.
func (f *FS) PortLinks(nqn string) map[string]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]int64{}
	for _, port := range f.children(path.Join(f.Root, "ports")) {
		if n, ok := f.nodes[path.Join(f.Root, "ports", port, "subsystems", nqn)]; ok {
			out[port] = n.Seq
		}
	}
	return out
}

// Remove removes a link.
func (f *FS) Remove(link string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	link = path.Clean(link)
	n, ok := f.nodes[link]
	if !ok {
		return perr("unlink", link, syscall.ENOENT)
	}
	if n.Link == "" {
		return perr("unlink", link, syscall.EPERM)
	}
	delete(f.nodes, link)
	return f.save()
}

// ReadDir lists a directory's entries.
func (f *FS) ReadDir(p string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	p = path.Clean(p)
	n, ok := f.nodes[p]
	if !ok {
		return nil, perr("readdir", p, syscall.ENOENT)
	}
	if !n.Dir {
		return nil, perr("readdir", p, syscall.ENOTDIR)
	}
	var out []string
	for _, c := range f.children(p) {
		if cn := f.nodes[path.Join(p, c)]; cn.Dir || cn.Link != "" || n.Kind == "" {
			out = append(out, c)
		}
	}
	return out, nil
}

// Exists reports whether p exists.
func (f *FS) Exists(p string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.nodes[path.Clean(p)]
	return ok
}
