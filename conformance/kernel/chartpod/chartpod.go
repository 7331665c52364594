// Package chartpod turns the pods the pillar-csi chart renders into OCI
// runtime bundles (runtime-spec configurations), as a kubelet and
// containerd would for the chart's privileged host-network DaemonSets, so
// the qemu guest can run the production images with the chart's args, env
// and mounts under runc on a real kernel (make e2e-kernel) without a
// cluster. Only what those pods use is translated; anything else (a volume
// kind, a non-privileged container, a pod network) is refused rather than
// approximated.
package chartpod

import (
	"encoding/json"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// Payload is what the host hands the guest (pods.json on the payload disk):
// the rendered agent and node pod specs, the ConfigMaps their volumes name,
// and the images those pods reference, unpacked into layer directories.
type Payload struct {
	Agent      corev1.PodSpec               `json:"agent"`
	Node       corev1.PodSpec               `json:"node"`
	ConfigMaps map[string]map[string]string `json:"configMaps"`
	Images     map[string]Image             `json:"images"`
}

// Image is an image's root file system and the parts of its configuration
// a container's process inherits.
type Image struct {
	// Layers are directories relative to the payload, lowest first.
	Layers     []string `json:"layers"`
	Entrypoint []string `json:"entrypoint,omitempty"`
	Cmd        []string `json:"cmd,omitempty"`
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"workingDir,omitempty"`
}

// GuestValues are the chart values of the guest run: the defaults (images,
// args, mounts) and the one thing a chart install must add, the agent's
// backends: an LVM volume group with a thin pool and a ZFS pool.
func GuestValues() map[string]any {
	return map[string]any{"agent": map[string]any{"backends": []any{
		map[string]any{"lvm": map[string]any{"volumeGroup": "vgchart", "thinPool": "thin"}},
		map[string]any{"zfs": map[string]any{"pool": "tankchart", "parentDataset": "k8s"}},
	}}}
}

// FromManifests picks the agent and node DaemonSets (by their component
// label) and every ConfigMap out of rendered manifests (JSON).
func FromManifests(manifests [][]byte) (*Payload, error) {
	p := &Payload{ConfigMaps: map[string]map[string]string{}, Images: map[string]Image{}}
	var agent, node bool
	for _, m := range manifests {
		var tm struct{ Kind string }
		if err := json.Unmarshal(m, &tm); err != nil {
			return nil, err
		}
		switch tm.Kind {
		case "DaemonSet":
			var ds appsv1.DaemonSet
			if err := json.Unmarshal(m, &ds); err != nil {
				return nil, err
			}
			switch ds.Labels["app.kubernetes.io/component"] {
			case "agent":
				p.Agent, agent = ds.Spec.Template.Spec, true
			case "node":
				p.Node, node = ds.Spec.Template.Spec, true
			}
		case "ConfigMap":
			var cm corev1.ConfigMap
			if err := json.Unmarshal(m, &cm); err != nil {
				return nil, err
			}
			p.ConfigMaps[cm.Name] = cm.Data
		}
	}
	if !agent || !node {
		return nil, fmt.Errorf("the manifests lack the agent or the node DaemonSet (agent %v, node %v)", agent, node)
	}
	return p, nil
}

// ImageRefs are the images of the agent's and the node's privileged
// containers and init containers (those Translate accepts; the sidecars
// are not run), sorted.
func (p *Payload) ImageRefs() []string {
	seen := map[string]bool{}
	for _, s := range []corev1.PodSpec{p.Agent, p.Node} {
		for _, c := range append(append([]corev1.Container{}, s.InitContainers...), s.Containers...) {
			if privileged(&c) {
				seen[c.Image] = true
			}
		}
	}
	var out []string
	for r := range seen {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Container finds a container or init container of a pod by name.
func Container(pod *corev1.PodSpec, name string) (*corev1.Container, error) {
	for _, cs := range [][]corev1.Container{pod.InitContainers, pod.Containers} {
		for i := range cs {
			if cs[i].Name == name {
				return &cs[i], nil
			}
		}
	}
	return nil, fmt.Errorf("no container %q in the pod", name)
}

// Node is where a pod runs: its name (the downward API's spec.nodeName)
// and its host paths. Two "nodes" on one guest share the kernel (/dev,
// /sys) but not their per-node directories (the NVMe identity, the plugin
// socket), so HostPath maps a hostPath volume's path to where this node
// keeps it; nil keeps every path.
type Node struct {
	Name     string
	HostPath func(string) string
}

func (n Node) hostPath(p string) string {
	if n.HostPath == nil {
		return p
	}
	return n.HostPath(p)
}

// Bundle is a container's runtime configuration and what the host must
// hold before it starts: directories a kubelet creates (hostPath
// DirectoryOrCreate, emptyDir), directories it requires (hostPath
// Directory) and files it writes (configMap volumes).
type Bundle struct {
	Spec   *specs.Spec
	Create []string
	Need   []string
	Files  map[string][]byte
}

// Prepare makes the host ready for the bundle: it creates the directories
// and files, and checks the required directories exist.
func (b *Bundle) Prepare() error {
	for _, d := range b.Create {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	for _, d := range b.Need {
		if st, err := os.Stat(d); err != nil || !st.IsDir() {
			return fmt.Errorf("hostPath %s must be an existing directory (type Directory): %v", d, err)
		}
	}
	for f, data := range b.Files {
		if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(f, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Write stores the configuration as dir/config.json.
func (b *Bundle) Write(dir string) error {
	j, err := json.MarshalIndent(b.Spec, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), j, 0o644)
}

// Translate builds the bundle of container c of pod: its process (command,
// args and env resolved as a kubelet resolves them), privileges, mounts and
// resources. rootfs is the container's root file system on the host,
// scratch a host directory for the pod's configMap and emptyDir volumes.
func Translate(p *Payload, pod *corev1.PodSpec, c *corev1.Container, node Node, rootfs, scratch string) (*Bundle, error) {
	img, ok := p.Images[c.Image]
	if !ok {
		return nil, fmt.Errorf("container %s: image %s is not in the payload", c.Name, c.Image)
	}
	if !privileged(c) {
		return nil, fmt.Errorf("container %s: only privileged containers are translated", c.Name)
	}
	if !pod.HostNetwork {
		return nil, fmt.Errorf("container %s: the pod is not on the host network (no pod network in the guest)", c.Name)
	}
	env, err := environment(img, c, node)
	if err != nil {
		return nil, err
	}
	args := processArgs(img, c, env)
	if len(args) == 0 {
		return nil, fmt.Errorf("container %s: no command (neither the container nor its image names one)", c.Name)
	}
	cwd := c.WorkingDir
	if cwd == "" {
		cwd = img.WorkingDir
	}
	if cwd == "" {
		cwd = "/"
	}
	readOnlyRoot := c.SecurityContext.ReadOnlyRootFilesystem != nil && *c.SecurityContext.ReadOnlyRootFilesystem
	caps := allCapabilities()
	b := &Bundle{Files: map[string][]byte{}, Spec: &specs.Spec{
		Version: specs.Version,
		Process: &specs.Process{
			Args: args,
			Env:  envList(env),
			Cwd:  cwd,
			// A privileged container gets every capability (none
			// inheritable, as containerd gives them) and no seccomp
			// or AppArmor profile.
			Capabilities: &specs.LinuxCapabilities{Bounding: caps, Effective: caps, Permitted: caps},
		},
		Root: &specs.Root{Path: rootfs, Readonly: readOnlyRoot},
		Linux: &specs.Linux{
			// Host network and so the host's UTS namespace; the
			// rest of the pod's own.
			Namespaces: []specs.LinuxNamespace{{Type: specs.PIDNamespace}, {Type: specs.IPCNamespace}, {Type: specs.MountNamespace}, {Type: specs.CgroupNamespace}},
			Resources:  resources(c),
		},
	}}
	if pod.HostPID {
		b.Spec.Linux.Namespaces = b.Spec.Linux.Namespaces[1:]
	}
	mounts, propagation, err := b.volumeMounts(p, pod, c, node, scratch)
	if err != nil {
		return nil, err
	}
	b.Spec.Linux.RootfsPropagation = propagation
	b.Spec.Mounts = withDefaults(mounts)
	return b, nil
}

func privileged(c *corev1.Container) bool {
	return c.SecurityContext != nil && c.SecurityContext.Privileged != nil && *c.SecurityContext.Privileged
}

// environment is the container's environment as a kubelet builds it: the
// image's, then the container's in order, each value expanding $(VAR) of
// those before it; spec.nodeName is the only field reference resolved.
func environment(img Image, c *corev1.Container, node Node) ([][2]string, error) {
	var env [][2]string
	set := func(k, v string) {
		for i := range env {
			if env[i][0] == k {
				env[i][1] = v
				return
			}
		}
		env = append(env, [2]string{k, v})
	}
	for _, kv := range img.Env {
		k, v, _ := strings.Cut(kv, "=")
		set(k, v)
	}
	if len(c.EnvFrom) > 0 {
		return nil, fmt.Errorf("container %s: envFrom is not translated", c.Name)
	}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			set(e.Name, expand(e.Value, env))
		case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
			set(e.Name, node.Name)
		default:
			return nil, fmt.Errorf("container %s: env %s: only the spec.nodeName field reference is translated", c.Name, e.Name)
		}
	}
	return env, nil
}

func envList(env [][2]string) []string {
	out := make([]string, len(env))
	for i, kv := range env {
		out[i] = kv[0] + "=" + kv[1]
	}
	return out
}

// processArgs applies Kubernetes' rule: command replaces the image's
// entrypoint (and drops its cmd), args replace the cmd; $(VAR) expands
// from the container's environment.
func processArgs(img Image, c *corev1.Container, env [][2]string) []string {
	var argv []string
	switch {
	case len(c.Command) > 0:
		argv = append(append(argv, c.Command...), c.Args...)
	case len(c.Args) > 0:
		argv = append(append(argv, img.Entrypoint...), c.Args...)
	default:
		argv = append(append(argv, img.Entrypoint...), img.Cmd...)
	}
	for i := range argv {
		argv[i] = expand(argv[i], env)
	}
	return argv
}

// expand replaces $(VAR) with VAR's value when VAR is defined and $$ with
// $, leaving any other text as it is (Kubernetes' dependent variables).
func expand(s string, env [][2]string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '$' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		switch s[i+1] {
		case '$':
			b.WriteByte('$')
			i++
			continue
		case '(':
			if end := strings.IndexByte(s[i+2:], ')'); end >= 0 {
				name := s[i+2 : i+2+end]
				if v, ok := lookup(env, name); ok {
					b.WriteString(v)
					i += 2 + end
					continue
				}
			}
		}
		b.WriteByte('$')
	}
	return b.String()
}

func lookup(env [][2]string, name string) (string, bool) {
	for _, kv := range env {
		if kv[0] == name {
			return kv[1], true
		}
	}
	return "", false
}

// volumeMounts translates the container's volume mounts: hostPath as a
// recursive bind of the node's path with the mount's propagation,
// configMap as read-only files, emptyDir as a scratch directory. It also
// returns the root propagation the mounts need (containerd's rule: shared
// when a mount is Bidirectional, slave when one is HostToContainer).
func (b *Bundle) volumeMounts(p *Payload, pod *corev1.PodSpec, c *corev1.Container, node Node, scratch string) ([]specs.Mount, string, error) {
	vols := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		vols[v.Name] = v
	}
	var out []specs.Mount
	rootProp := ""
	for _, vm := range c.VolumeMounts {
		v, ok := vols[vm.Name]
		if !ok {
			return nil, "", fmt.Errorf("container %s: volume %s is not in the pod", c.Name, vm.Name)
		}
		if vm.SubPath != "" || vm.SubPathExpr != "" {
			return nil, "", fmt.Errorf("container %s: volume %s: subPath is not translated", c.Name, vm.Name)
		}
		prop := "rprivate"
		if vm.MountPropagation != nil {
			switch *vm.MountPropagation {
			case corev1.MountPropagationBidirectional:
				prop, rootProp = "rshared", "rshared"
			case corev1.MountPropagationHostToContainer:
				prop = "rslave"
				if rootProp == "" {
					rootProp = "rslave"
				}
			}
		}
		mode := "rw"
		if vm.ReadOnly {
			mode = "ro"
		}
		var src string
		switch {
		case v.HostPath != nil:
			src = node.hostPath(v.HostPath.Path)
			t := corev1.HostPathUnset
			if v.HostPath.Type != nil {
				t = *v.HostPath.Type
			}
			switch t {
			case corev1.HostPathUnset:
			case corev1.HostPathDirectoryOrCreate:
				b.Create = append(b.Create, src)
			case corev1.HostPathDirectory:
				b.Need = append(b.Need, src)
			default:
				return nil, "", fmt.Errorf("container %s: volume %s: hostPath type %s is not translated", c.Name, vm.Name, t)
			}
		case v.ConfigMap != nil:
			data, ok := p.ConfigMaps[v.ConfigMap.Name]
			if !ok {
				return nil, "", fmt.Errorf("container %s: volume %s: no ConfigMap %s", c.Name, vm.Name, v.ConfigMap.Name)
			}
			src = filepath.Join(scratch, "configmap", vm.Name)
			b.Create = append(b.Create, src)
			for k, d := range data {
				b.Files[filepath.Join(src, k)] = []byte(d)
			}
			// A kubelet mounts configMap volumes read-only.
			mode = "ro"
		case v.EmptyDir != nil:
			src = filepath.Join(scratch, "empty-dir", vm.Name)
			b.Create = append(b.Create, src)
		default:
			return nil, "", fmt.Errorf("container %s: volume %s: only hostPath, configMap and emptyDir volumes are translated", c.Name, vm.Name)
		}
		out = append(out, specs.Mount{Destination: vm.MountPath, Type: "bind", Source: src, Options: []string{"rbind", prop, mode}})
	}
	return out, rootProp, nil
}

// withDefaults puts containerd's default mounts (made privileged: /sys and
// the cgroup tree writable) before the pod's, drops a default the pod
// replaces (the chart binds the host's /dev and /sys), and orders mounts
// parents first as containerd does.
func withDefaults(pod []specs.Mount) []specs.Mount {
	defaults := []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue", Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "rw"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup", Options: []string{"nosuid", "noexec", "nodev", "relatime", "rw"}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
	}
	replaced := map[string]bool{}
	for _, m := range pod {
		replaced[path.Clean(m.Destination)] = true
	}
	var out []specs.Mount
	for _, m := range defaults {
		if !replaced[m.Destination] {
			out = append(out, m)
		}
	}
	out = append(out, pod...)
	depth := func(p string) int { return strings.Count(path.Clean(p), "/") }
	sort.SliceStable(out, func(i, j int) bool { return depth(out[i].Destination) < depth(out[j].Destination) })
	return out
}

// resources: every device allowed (privileged), and the container's memory
// and CPU limits and CPU request as a kubelet sets them.
func resources(c *corev1.Container) *specs.LinuxResources {
	r := &specs.LinuxResources{Devices: []specs.LinuxDeviceCgroup{{Allow: true, Access: "rwm"}}}
	if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
		v := q.Value()
		r.Memory = &specs.LinuxMemory{Limit: &v}
	}
	if q, ok := c.Resources.Requests[corev1.ResourceCPU]; ok {
		shares := uint64(max(q.MilliValue()*1024/1000, 2))
		r.CPU = &specs.LinuxCPU{Shares: &shares}
	}
	if q, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
		if r.CPU == nil {
			r.CPU = &specs.LinuxCPU{}
		}
		period, quota := uint64(100000), q.MilliValue()*100
		r.CPU.Period, r.CPU.Quota = &period, &quota
	}
	return r
}

// allCapabilities are the capabilities of Linux 6.1 (the guest's kernel).
func allCapabilities() []string {
	names := []string{"CHOWN", "DAC_OVERRIDE", "DAC_READ_SEARCH", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID",
		"SETPCAP", "LINUX_IMMUTABLE", "NET_BIND_SERVICE", "NET_BROADCAST", "NET_ADMIN", "NET_RAW", "IPC_LOCK",
		"IPC_OWNER", "SYS_MODULE", "SYS_RAWIO", "SYS_CHROOT", "SYS_PTRACE", "SYS_PACCT", "SYS_ADMIN", "SYS_BOOT",
		"SYS_NICE", "SYS_RESOURCE", "SYS_TIME", "SYS_TTY_CONFIG", "MKNOD", "LEASE", "AUDIT_WRITE", "AUDIT_CONTROL",
		"SETFCAP", "MAC_OVERRIDE", "MAC_ADMIN", "SYSLOG", "WAKE_ALARM", "BLOCK_SUSPEND", "AUDIT_READ", "PERFMON",
		"BPF", "CHECKPOINT_RESTORE"}
	for i, n := range names {
		names[i] = "CAP_" + n
	}
	return names
}
