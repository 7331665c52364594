package chartpod_test

import (
	"flag"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/pillarhq/pillar/conformance/charts"
	"github.com/pillarhq/pillar/conformance/kernel/chartpod"
)

// bin-dir is accepted (and unused) so one `go test ./conformance/... -args
// -bin-dir=…` drives every suite.
var _ = flag.String("bin-dir", "", "unused")

// payload renders the chart with the guest's values, as the e2e's
// chartpayload command does, with stand-in images (entrypoint and env as
// scripts/images.sh builds them).
func payload(t *testing.T) *chartpod.Payload {
	t.Helper()
	objs, err := charts.Render("pillar-csi", chartpod.GuestValues())
	if err != nil {
		t.Fatal(err)
	}
	var ms [][]byte
	for _, o := range objs {
		ms = append(ms, o.JSON)
	}
	p, err := chartpod.FromManifests(ms)
	if err != nil {
		t.Fatal(err)
	}
	refs := p.ImageRefs()
	if len(refs) != 3 || !strings.Contains(refs[0], "busybox") {
		t.Fatalf("images %q, want the init containers' busybox, the agent's and the node's", refs)
	}
	for _, ref := range refs {
		img := chartpod.Image{Layers: []string{"layers/base"}, Env: []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}
		switch {
		case strings.Contains(ref, "/agent:"):
			img.Entrypoint = []string{"/usr/local/bin/pillar-agent"}
		case strings.Contains(ref, "/node:"):
			img.Entrypoint = []string{"/usr/local/bin/pillar-node"}
		default:
			img.Cmd = []string{"sh"}
		}
		p.Images[ref] = img
	}
	return p
}

func translate(t *testing.T, p *chartpod.Payload, component, container string, node chartpod.Node) *chartpod.Bundle {
	t.Helper()
	pod := &p.Agent
	if component == "node" {
		pod = &p.Node
	}
	c, err := chartpod.Container(pod, container)
	if err != nil {
		t.Fatal(err)
	}
	b, err := chartpod.Translate(p, pod, c, node, "/rootfs", "/scratch")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func mount(t *testing.T, s *specs.Spec, dest string) specs.Mount {
	t.Helper()
	var found []specs.Mount
	for _, m := range s.Mounts {
		if m.Destination == dest {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%d mounts at %s, want 1: %+v", len(found), dest, s.Mounts)
	}
	return found[0]
}

func wantBind(t *testing.T, s *specs.Spec, dest, src string, opts ...string) {
	t.Helper()
	m := mount(t, s, dest)
	if m.Type != "bind" || m.Source != src || !slices.Equal(m.Options, append([]string{"rbind"}, opts...)) {
		t.Errorf("mount %s = %+v, want a bind of %s with rbind %v", dest, m, src, opts)
	}
}

func hasNamespace(s *specs.Spec, t specs.LinuxNamespaceType) bool {
	for _, n := range s.Linux.Namespaces {
		if n.Type == t {
			return true
		}
	}
	return false
}

// privileged asserts what the chart's privileged host-network containers
// get: every capability, every device, no seccomp or AppArmor, the host
// network and the host's /sys writable.
func privileged(t *testing.T, s *specs.Spec) {
	t.Helper()
	caps := s.Process.Capabilities
	for _, c := range []string{"CAP_SYS_ADMIN", "CAP_SYS_MODULE", "CAP_MKNOD", "CAP_CHECKPOINT_RESTORE"} {
		if !slices.Contains(caps.Bounding, c) || !slices.Contains(caps.Effective, c) || !slices.Contains(caps.Permitted, c) {
			t.Errorf("capability %s missing: %+v", c, caps)
		}
	}
	if len(caps.Bounding) != 41 {
		t.Errorf("%d capabilities, want all 41 of Linux 6.1", len(caps.Bounding))
	}
	if s.Linux.Seccomp != nil || s.Process.ApparmorProfile != "" || len(s.Linux.MaskedPaths) > 0 || len(s.Linux.ReadonlyPaths) > 0 {
		t.Errorf("a privileged container is confined: seccomp %v, apparmor %q, masked %v, read-only %v",
			s.Linux.Seccomp, s.Process.ApparmorProfile, s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
	if d := s.Linux.Resources.Devices; len(d) != 1 || !d[0].Allow || d[0].Access != "rwm" || d[0].Major != nil {
		t.Errorf("device rules %+v, want every device allowed", d)
	}
	if hasNamespace(s, specs.NetworkNamespace) || hasNamespace(s, specs.UTSNamespace) {
		t.Errorf("namespaces %v: want the host's network and UTS", s.Linux.Namespaces)
	}
	if !hasNamespace(s, specs.MountNamespace) || !hasNamespace(s, specs.PIDNamespace) {
		t.Errorf("namespaces %v: want the pod's own mount and PID namespaces", s.Linux.Namespaces)
	}
	wantBind(t, s, "/sys", "/sys", "rprivate", "rw")
	wantBind(t, s, "/dev", "/dev", "rprivate", "rw")
	wantBind(t, s, "/lib/modules", "/lib/modules", "rprivate", "ro")
	if m := mount(t, s, "/proc"); m.Type != "proc" {
		t.Errorf("/proc: %+v", m)
	}
	// Parents before children, so /dev/pts lands on the host's /dev.
	for i, m := range s.Mounts {
		for _, later := range s.Mounts[i+1:] {
			if strings.HasPrefix(m.Destination, later.Destination+"/") {
				t.Errorf("%s is mounted before its parent %s", m.Destination, later.Destination)
			}
		}
	}
}

func TestAgentPodTranslatesToAPrivilegedHostBundle(t *testing.T) {
	p := payload(t)
	b := translate(t, p, "agent", "agent", chartpod.Node{Name: "node-a"})
	s := b.Spec
	privileged(t, s)
	want := []string{"/usr/local/bin/pillar-agent", "--config=/etc/pillar-csi/agent/config.yaml", "--listen=:9500", "--health-listen=:9502", "--state-dir=/var/lib/pillar-csi/agent"}
	if !slices.Equal(s.Process.Args, want) {
		t.Errorf("args %q, want %q (the image's entrypoint and the chart's args)", s.Process.Args, want)
	}
	if s.Linux.RootfsPropagation != "" {
		t.Errorf("root propagation %q: the agent has no propagating mount", s.Linux.RootfsPropagation)
	}
	// The backends of the values reach the agent as its config file.
	wantBind(t, s, "/etc/pillar-csi/agent", "/scratch/configmap/config", "rprivate", "ro")
	// The generations outlive the container on the host's disk.
	wantBind(t, s, "/var/lib/pillar-csi/agent", "/var/lib/pillar-csi/agent", "rprivate", "rw")
	cfg := string(b.Files["/scratch/configmap/config/config.yaml"])
	if !strings.Contains(cfg, "volumeGroup: vgchart") || !strings.Contains(cfg, "pool: tankchart") {
		t.Errorf("agent config file:\n%s", cfg)
	}
	if l := s.Linux.Resources.Memory; l == nil || *l.Limit != 256<<20 {
		t.Errorf("memory limit %+v, want the chart's 256Mi", l)
	}
	if c := s.Linux.Resources.CPU; c == nil || *c.Quota != 50000 || *c.Period != 100000 || *c.Shares != 10 {
		t.Errorf("cpu %+v, want the chart's 500m limit and 10m request", c)
	}

	init := translate(t, p, "agent", "modprobe", chartpod.Node{Name: "node-a"})
	if a := init.Spec.Process.Args; len(a) < 6 || a[0] != "sh" || a[3] != "modprobe" || !slices.Equal(a[4:], []string{"nvmet", "nvmet_tcp"}) {
		t.Errorf("init container args %q", a)
	}
}

func TestNodePodTranslatesWithBidirectionalKubeletDirAndTheHostsIdentity(t *testing.T) {
	p := payload(t)
	b := translate(t, p, "node", "node", chartpod.Node{Name: "node-a"})
	s := b.Spec
	privileged(t, s)
	if !slices.Contains(s.Process.Args, "--node-id=node-a") || !slices.Contains(s.Process.Args, "--csi-endpoint=unix:///var/lib/kubelet/plugins/pillar-csi.pillarhq.io/csi.sock") {
		t.Errorf("args %q: want $(NODE_NAME) expanded from spec.nodeName and the chart's socket", s.Process.Args)
	}
	if !slices.Contains(s.Process.Env, "NODE_NAME=node-a") || !slices.Contains(s.Process.Env, "PATH=/usr/sbin:/usr/bin:/sbin:/bin") {
		t.Errorf("env %q", s.Process.Env)
	}
	// Mounts made under the kubelet directory (staging, the pod's
	// target) reach the host: rshared, and the root shared with it.
	wantBind(t, s, "/var/lib/kubelet", "/var/lib/kubelet", "rshared", "rw")
	if s.Linux.RootfsPropagation != "rshared" {
		t.Errorf("root propagation %q, want rshared for a Bidirectional mount", s.Linux.RootfsPropagation)
	}
	wantBind(t, s, "/etc/nvme", "/etc/nvme", "rprivate", "rw")
	wantBind(t, s, "/var/lib/kubelet/plugins/pillar-csi.pillarhq.io", "/var/lib/kubelet/plugins/pillar-csi.pillarhq.io", "rprivate", "rw")
	if !slices.Contains(b.Create, "/etc/nvme") || !slices.Contains(b.Need, "/var/lib/kubelet") {
		t.Errorf("create %v, need %v: want /etc/nvme created (DirectoryOrCreate) and the kubelet dir required (Directory)", b.Create, b.Need)
	}

	// A second node on the same kernel keeps its identity and kubelet
	// directories apart and shares /dev and /sys.
	nodeB := chartpod.Node{Name: "node-b", HostPath: func(p string) string {
		if p == "/dev" || p == "/sys" || p == "/lib/modules" {
			return p
		}
		return filepath.Join("/var/tmp/node-b", p)
	}}
	sb := translate(t, p, "node", "node", nodeB).Spec
	wantBind(t, sb, "/etc/nvme", "/var/tmp/node-b/etc/nvme", "rprivate", "rw")
	wantBind(t, sb, "/var/lib/kubelet", "/var/tmp/node-b/var/lib/kubelet", "rshared", "rw")
	wantBind(t, sb, "/dev", "/dev", "rprivate", "rw")
	if !slices.Contains(sb.Process.Args, "--node-id=node-b") {
		t.Errorf("node B args %q", sb.Process.Args)
	}
}

func TestTranslateRefusesWhatItDoesNotModel(t *testing.T) {
	p := payload(t)
	c, _ := chartpod.Container(&p.Node, "node-driver-registrar")
	p.Images[c.Image] = chartpod.Image{Entrypoint: []string{"/registrar"}}
	if _, err := chartpod.Translate(p, &p.Node, c, chartpod.Node{Name: "a"}, "/r", "/s"); err == nil || !strings.Contains(err.Error(), "privileged") {
		t.Errorf("unprivileged sidecar: %v, want a refusal", err)
	}
	pod := p.Agent
	pod.HostNetwork = false
	c, _ = chartpod.Container(&pod, "agent")
	if _, err := chartpod.Translate(p, &pod, c, chartpod.Node{Name: "a"}, "/r", "/s"); err == nil || !strings.Contains(err.Error(), "host network") {
		t.Errorf("pod network: %v, want a refusal", err)
	}
}
