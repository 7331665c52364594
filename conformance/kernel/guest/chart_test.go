//go:build kernelguest

package guest

// The chart's production path on the real kernel (issue 20.6): the agent
// and node containers the pillar-csi chart renders, from the production
// images, with the chart's args, env, privileges and mounts (translated to
// OCI bundles by conformance/kernel/chartpod), run under runc on the guest
// as a kubelet would run them: the agent on a real LVM thin pool and a ZFS
// pool, the node with the real `nvme` connector and the host's NVMe
// identity. The controller is the payload's binary (standalone stores; in
// the chart it has no host mounts). A claim is created, staged and
// published under the kubelet's directories, the "pod" writes through the
// host's view of its mount (Bidirectional propagation), a second node
// (its own identity directory) is refused, the agent's container is killed
// and a new one started on an emptied target (a storage node reboot) and
// the pod's I/O resumes on the same device, and the volume grows.

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"

	"github.com/pillarhq/pillar/conformance/kernel/chartpod"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/kubecontroller"
)

const (
	chartPayload = "/payload/chart"
	chartDriver  = "pillar-csi.pillarhq.io"
	kubeletDir   = "/var/lib/kubelet"
)

// container is one runc container of a chart pod.
type container struct {
	id, dir, log string
	cmd          *exec.Cmd
	done         chan error
}

// overlayRoot mounts the image's layers (read-only on the payload) under a
// fresh writable layer, as a container runtime does per container.
func overlayRoot(t *testing.T, img chartpod.Image, dir string) string {
	t.Helper()
	var lower []string
	for i := len(img.Layers) - 1; i >= 0; i-- {
		lower = append(lower, filepath.Join(chartPayload, img.Layers[i]))
	}
	rootfs, upper, work := filepath.Join(dir, "rootfs"), filepath.Join(dir, "upper"), filepath.Join(dir, "work")
	for _, d := range []string{rootfs, upper, work} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	sh(t, "mount", "-t", "overlay", "overlay", "-o", "lowerdir="+strings.Join(lower, ":")+",upperdir="+upper+",workdir="+work, rootfs)
	// Private, so what runc mounts into the root stays in the container.
	sh(t, "mount", "--make-private", rootfs)
	t.Cleanup(func() { try("umount", "-l", rootfs) })
	return rootfs
}

// bundle prepares container name of pod on node as runc bundle id.
func bundle(t *testing.T, p *chartpod.Payload, pod *corev1.PodSpec, name string, node chartpod.Node, id string) string {
	t.Helper()
	c, err := chartpod.Container(pod, name)
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("/var/tmp/chart", id)
	rootfs := overlayRoot(t, p.Images[c.Image], dir)
	b, err := chartpod.Translate(p, pod, c, node, rootfs, filepath.Join(dir, "scratch"))
	if err != nil {
		t.Fatal(err)
	}
	b.Spec.Linux.CgroupsPath = "/pillar-chart/" + id
	if err := b.Prepare(); err != nil {
		t.Fatal(err)
	}
	if err := b.Write(dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

// runInit runs a pod's init container to completion, as a kubelet does
// before the pod's containers; it must exit 0.
func runInit(t *testing.T, p *chartpod.Payload, pod *corev1.PodSpec, node chartpod.Node, id string) string {
	t.Helper()
	var out []byte
	for _, c := range pod.InitContainers {
		dir := bundle(t, p, pod, c.Name, node, id+"-"+c.Name)
		// An init container that never ends fails here, not at the run's
		// timeout.
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		b, err := exec.CommandContext(ctx, "runc", "run", "--bundle", dir, id+"-"+c.Name).CombinedOutput()
		cancel()
		try("runc", "delete", "-f", id+"-"+c.Name)
		if err != nil {
			t.Fatalf("init container %s of %s: %v\n%s", c.Name, id, err, b)
		}
		out = append(out, b...)
	}
	return string(out)
}

// startContainer starts a pod's long-running container under runc.
func startContainer(t *testing.T, p *chartpod.Payload, pod *corev1.PodSpec, name string, node chartpod.Node, id string) *container {
	t.Helper()
	c := &container{id: id, dir: bundle(t, p, pod, name, node, id), log: "/tmp/" + id + ".log", done: make(chan error, 1)}
	logf, err := os.Create(c.log)
	if err != nil {
		t.Fatal(err)
	}
	c.cmd = exec.Command("runc", "run", "--bundle", c.dir, id)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { c.done <- c.cmd.Wait(); logf.Close() }()
	t.Cleanup(func() {
		c.kill()
		if t.Failed() {
			b, _ := os.ReadFile(c.log)
			t.Logf("container %s log:\n%s", id, b)
		}
	})
	return c
}

// kill stops the container as a kubelet kills a pod's container: SIGKILL,
// then its removal.
func (c *container) kill() {
	if c.cmd == nil {
		return
	}
	try("runc", "kill", c.id, "KILL")
	select {
	case <-c.done:
	case <-time.After(30 * time.Second):
		c.cmd.Process.Kill()
	}
	try("runc", "delete", "-f", c.id)
	c.cmd = nil
}

// running fails the test when the container has exited.
func (c *container) running(t *testing.T) {
	t.Helper()
	select {
	case err := <-c.done:
		c.done <- err
		b, _ := os.ReadFile(c.log)
		t.Fatalf("container %s exited: %v\n%s", c.id, err, b)
	default:
	}
}

// hostLikeKubelet makes the guest look like a kubelet's host: the cgroup
// tree mounted, mounts shared (systemd's default, which Bidirectional
// propagation needs), the kubelet's directory present.
func hostLikeKubelet(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
		sh(t, "mount", "-t", "cgroup2", "cgroup2", "/sys/fs/cgroup")
	}
	sh(t, "mount", "--make-rshared", "/")
	if err := os.MkdirAll(kubeletDir, 0o750); err != nil {
		t.Fatal(err)
	}
}

// probe is a kubelet's probe: an answer within seconds or a failure.
var probe = &http.Client{Timeout: 5 * time.Second}

func waitHealthy(t *testing.T, c *container, url string) {
	t.Helper()
	waitFor(t, url, 90*time.Second, func() bool {
		c.running(t)
		r, err := probe.Get(url)
		if err != nil {
			return false
		}
		r.Body.Close()
		return r.StatusCode == http.StatusOK
	})
}

// claim is one PVC's volume as the kubelet sees it.
type claim struct {
	name, store     string
	id, uuid, nqn   string
	pub             map[string]string
	staging, target string
	dev             string
}

func TestChartOnRealKernel(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(chartPayload, "pods.json"))
	if err != nil {
		t.Fatalf("no chart payload (scripts/e2e-kernel.sh writes it with conformance/kernel/cmd/chartpayload): %v", err)
	}
	var p chartpod.Payload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	resetTarget(t)
	t.Cleanup(func() { resetTarget(t) })
	hostLikeKubelet(t)

	// The images carry no NVMe identity of their own (issue 20.1).
	for ref, img := range p.Images {
		for _, l := range img.Layers {
			if _, err := os.Stat(filepath.Join(chartPayload, l, "etc/nvme/hostnqn")); err == nil {
				t.Fatalf("image %s has a baked /etc/nvme/hostnqn (layer %s)", ref, l)
			}
		}
	}

	// The agent's pools, named by the values (chartpod.GuestValues).
	vgDev := loopDevice(t, 1<<30)
	sh(t, "pvcreate", "-q", "-y", vgDev)
	sh(t, "vgcreate", "-q", "vgchart", vgDev)
	sh(t, "lvcreate", "-q", "-y", "--type", "thin-pool", "-L", "512m", "-n", "thin", "vgchart")
	t.Cleanup(func() { try("vgremove", "-q", "-f", "vgchart") })
	zDev := loopDevice(t, 1<<30)
	sh(t, "zpool", "create", "-f", "-O", "mountpoint=none", "tankchart", zDev)
	sh(t, "zfs", "create", "tankchart/k8s")
	t.Cleanup(func() {
		for i := 0; i < 20; i++ {
			if _, err := try("zpool", "destroy", "-f", "tankchart"); err == nil {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	})

	nodeA := chartpod.Node{Name: "node-a"}
	if out := runInit(t, &p, &p.Agent, nodeA, "agent-0"); strings.Contains(out, "failed") {
		t.Fatalf("the agent's modprobe init container: %s", out)
	}
	agent := startContainer(t, &p, &p.Agent, "agent", nodeA, "agent-0")
	waitHealthy(t, agent, "http://127.0.0.1:9502/healthz")

	dir := t.TempDir()
	storesFile := filepath.Join(dir, "stores.yaml")
	os.WriteFile(storesFile, []byte("stores:\n"+
		"  - name: lvm\n    agent: 127.0.0.1:9500\n    backend: {lvm: {volumeGroup: vgchart, thinPool: thin, provisioningMode: thin}}\n"+
		"  - name: zfs\n    agent: 127.0.0.1:9500\n    backend: {zfs: {pool: tankchart, parentDataset: k8s}}\n"), 0o644)
	startDaemon(t, "/payload/pillar-controller", "--standalone-stores", storesFile, "--csi-endpoint", "unix://"+dir+"/controller.sock")
	ctrl := csi.NewControllerClient(csiConn(t, dir+"/controller.sock"))

	if out := runInit(t, &p, &p.Node, nodeA, "node-a"); strings.Contains(out, "failed") {
		t.Fatalf("the node's modprobe init container: %s", out)
	}
	nodeCtr := startContainer(t, &p, &p.Node, "node", nodeA, "node-a")
	node := csi.NewNodeClient(csiConn(t, kubeletDir+"/plugins/"+chartDriver+"/csi.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	info, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || info.NodeId != "node-a/"+hostNQN(t) {
		t.Fatalf("node info %v %v: want node-a with the host's NQN (/etc/nvme mounted)", info, err)
	}

	// A claim on each backend: created with the StorageClass's store
	// parameter and attached to node A.
	fsCap := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
	claims := []*claim{{name: "pvc-chart-lvm", store: "lvm"}, {name: "pvc-chart-zfs", store: "zfs"}}
	volCtx := map[*claim]map[string]string{}
	for _, c := range claims {
		cv, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: c.name, VolumeCapabilities: []*csi.VolumeCapability{fsCap},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 192 << 20}, Parameters: map[string]string{"store": c.store}})
		if err != nil {
			t.Fatalf("create %s: %v", c.name, err)
		}
		c.id, volCtx[c] = cv.Volume.VolumeId, cv.Volume.VolumeContext
		pub, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: c.id, NodeId: info.NodeId, VolumeCapability: fsCap, VolumeContext: volCtx[c]})
		if err != nil {
			t.Fatalf("publish %s: %v", c.name, err)
		}
		c.pub, c.uuid, c.nqn = pub.PublishContext, pub.PublishContext["uuid"], pub.PublishContext["nqn"]
	}

	// Whatever fails, leave no mount or controller behind: a controller
	// whose target is gone retries for the chart's ctrl-loss-tmo (30
	// minutes), and the guest's final sync would wait on it.
	t.Cleanup(func() {
		for _, c := range claims {
			if c.target != "" {
				try("umount", "-l", c.target)
				try("umount", "-l", c.staging)
			}
			if c.nqn != "" && controllersOf(c.nqn) > 0 {
				try("nvme", "disconnect", "-n", c.nqn)
			}
		}
	})

	// Before node A connects: both "nodes" share this one kernel, so once
	// A's controller is up its namespace is a device B would see too.
	t.Run("node B refused", func(t *testing.T) {
		// A second node: its own identity directory (empty, so the node
		// writes a new identity at first start) and kubelet directory;
		// the kernel (/dev, /sys, modules) is shared.
		rootB := "/var/tmp/node-b"
		nodeB := chartpod.Node{Name: "node-b", HostPath: func(p string) string {
			if p == "/dev" || p == "/sys" || p == "/lib/modules" {
				return p
			}
			return filepath.Join(rootB, p)
		}}
		os.MkdirAll(rootB+kubeletDir, 0o750)
		startContainer(t, &p, &p.Node, "node", nodeB, "node-b")
		nodeBClient := csi.NewNodeClient(csiConn(t, rootB+kubeletDir+"/plugins/"+chartDriver+"/csi.sock"))
		infoB, err := nodeBClient.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if err != nil {
			t.Fatal(err)
		}
		nqnB, err := os.ReadFile(rootB + "/etc/nvme/hostnqn")
		if err != nil || infoB.NodeId != "node-b/"+strings.TrimSpace(string(nqnB)) || strings.TrimSpace(string(nqnB)) == hostNQN(t) {
			t.Fatalf("node B %v, identity file %q (%v): want its own NQN, written to its host directory", infoB, nqnB, err)
		}
		c := claims[0]
		if _, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: c.id, NodeId: infoB.NodeId, VolumeCapability: fsCap}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("publish to node B while node A has it: %v, want FailedPrecondition", err)
		}
		stagingB := filepath.Join(rootB+kubeletDir, "plugins/kubernetes.io/csi", chartDriver, "b", "globalmount")
		os.MkdirAll(stagingB, 0o750)
		if _, err := nodeBClient.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: c.id, PublishContext: c.pub, StagingTargetPath: stagingB, VolumeCapability: fsCap, VolumeContext: volCtx[c]}); err == nil {
			t.Fatal("node B staged a volume exported to node A")
		}
		if n := controllersOf(c.nqn); n != 0 {
			t.Fatalf("%d controllers of %s after node B's attempt, want none", n, c.nqn)
		}
	})

	// Node A stages and publishes each claim where a kubelet puts them.
	data := map[*claim][]byte{}
	for _, c := range claims {
		sum := sha256.Sum256([]byte(c.id))
		c.staging = filepath.Join(kubeletDir, "plugins/kubernetes.io/csi", chartDriver, hex.EncodeToString(sum[:]), "globalmount")
		c.target = filepath.Join(kubeletDir, "pods", fmt.Sprintf("0000-pod-%s", c.store), "volumes/kubernetes.io~csi", c.name, "mount")
		os.MkdirAll(c.staging, 0o750)
		os.MkdirAll(filepath.Dir(c.target), 0o750)
		if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: c.id, PublishContext: c.pub, StagingTargetPath: c.staging, VolumeCapability: fsCap, VolumeContext: volCtx[c]}); err != nil {
			t.Fatalf("stage %s: %v", c.name, err)
		}
		if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: c.id, PublishContext: c.pub, StagingTargetPath: c.staging, TargetPath: c.target, VolumeCapability: fsCap, VolumeContext: volCtx[c]}); err != nil {
			t.Fatalf("publish %s on the node: %v", c.name, err)
		}
		c.dev = deviceByUUID(c.uuid)
		if !strings.HasPrefix(c.dev, "/dev/nvme") {
			t.Fatalf("%s: no NVMe device for uuid %s", c.name, c.uuid)
		}
		// The node's mounts reached the host (Bidirectional kubelet dir):
		// the "pod" sees the NVMe device's filesystem at its target.
		if src := sh(t, "findmnt", "-n", "-o", "SOURCE", c.target); src != c.dev {
			t.Fatalf("%s: the host sees %q at the pod's target, want %s", c.name, src, c.dev)
		}
		data[c] = pattern(t)
		writeFile(t, filepath.Join(c.target, "data"), data[c])
		t.Logf("%s: %s staged from %s at %s", c.name, c.id, c.dev, c.target)
	}

	top := t
	t.Run("agent restart on an emptied target", func(t *testing.T) {
		// A storage node reboot: the agent's container is killed, the
		// kernel target emptied, a new container started from the same
		// pod; the controller's recovery (kube mode) re-exports what is
		// attached, as RestoreExports does here, and the node's kernel
		// reconnects within the chart's ctrl-loss-tmo.
		agent.kill()
		resetTarget(t)
		if out := runInit(t, &p, &p.Agent, nodeA, "agent-1"); strings.Contains(out, "failed") {
			t.Fatalf("init: %s", out)
		}
		// Started for the rest of the test, not only this subtest.
		agent = startContainer(top, &p, &p.Agent, "agent", nodeA, "agent-1")
		waitHealthy(t, agent, "http://127.0.0.1:9502/healthz")
		var attached []kubecontroller.Attached
		for _, c := range claims {
			v, err := csiids.ParseVolume(c.id)
			if err != nil {
				t.Fatal(err)
			}
			attached = append(attached, kubecontroller.Attached{Volume: v, Hosts: []string{hostNQN(t)}})
		}
		if restored, err := kubecontroller.RestoreExports(ctx, dial(t), attached); err != nil || len(restored) != len(claims) {
			t.Fatalf("restore: %v %v", restored, err)
		}
		for _, c := range claims {
			waitFor(t, c.name+"'s controller to reconnect", 3*time.Minute, func() bool { return controllerLive(c.nqn) })
			if d := deviceByUUID(c.uuid); d != c.dev {
				t.Fatalf("%s: device %q after the restart, want the same %s", c.name, d, c.dev)
			}
			got := readFile(t, filepath.Join(c.target, "data"))
			if !sameBytes(got, data[c]) {
				t.Fatalf("%s: the pod's data differs after the agent restart", c.name)
			}
			fresh := pattern(t)
			writeFile(t, filepath.Join(c.target, "after-restart"), fresh)
			if !sameBytes(readFile(t, filepath.Join(c.target, "after-restart")), fresh) {
				t.Fatalf("%s: a write after the restart does not read back", c.name)
			}
		}
	})

	t.Run("volume grows", func(t *testing.T) {
		for _, c := range claims {
			before := fsSize(t, c.target)
			ex, err := ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: c.id, CapacityRange: &csi.CapacityRange{RequiredBytes: 384 << 20}, VolumeCapability: fsCap})
			if err != nil {
				t.Fatalf("expand %s: %v", c.name, err)
			}
			waitFor(t, c.name+"'s device to grow", 60*time.Second, func() bool { return blockSize(t, c.dev) >= 384<<20 })
			if !ex.NodeExpansionRequired {
				t.Fatalf("%s: a filesystem volume needs node expansion", c.name)
			}
			if _, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: c.id, VolumePath: c.target, StagingTargetPath: c.staging, VolumeCapability: fsCap, CapacityRange: &csi.CapacityRange{RequiredBytes: 384 << 20}}); err != nil {
				t.Fatalf("node expand %s: %v", c.name, err)
			}
			if after := fsSize(t, c.target); after < before+150<<20 {
				t.Fatalf("%s: filesystem %d -> %d bytes, want grown by the 192 MiB", c.name, before, after)
			}
			if !sameBytes(readFile(t, filepath.Join(c.target, "data")), data[c]) {
				t.Fatalf("%s: data differs after the expansion", c.name)
			}
		}
	})

	for _, c := range claims {
		if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: c.id, TargetPath: c.target}); err != nil {
			t.Fatal(err)
		}
		if _, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: c.id, StagingTargetPath: c.staging}); err != nil {
			t.Fatal(err)
		}
		if mounted(c.target) || mounted(c.staging) {
			t.Fatalf("%s: a mount is left after unstage", c.name)
		}
		if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: c.id, NodeId: info.NodeId}); err != nil {
			t.Fatal(err)
		}
		if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: c.id}); err != nil {
			t.Fatal(err)
		}
	}
	nodeCtr.running(t)
	agent.running(t)
	if left, _ := filepath.Glob("/sys/class/nvme-fabrics/ctl/nvme*"); len(left) > 0 {
		t.Fatalf("NVMe controllers left: %v", left)
	}
	if out := sh(t, "lvs", "--noheadings", "-o", "lv_name", "vgchart"); strings.Contains(out, "pvc-") {
		t.Fatalf("LVs left: %s", out)
	}
	if out := sh(t, "zfs", "list", "-H", "-r", "-t", "volume", "-o", "name", "tankchart"); out != "" {
		t.Fatalf("zvols left: %s", out)
	}
}

// controllersOf counts the host's NVMe controllers of subsystem nqn.
func controllersOf(nqn string) int {
	n := 0
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*")
	for _, c := range ctrls {
		if sub, _ := os.ReadFile(filepath.Join(c, "subsysnqn")); strings.TrimSpace(string(sub)) == nqn {
			n++
		}
	}
	return n
}

// writeFile writes as a pod would, durably (fsync), so the data is on the
// volume and not only in the page cache.
func writeFile(t *testing.T, name string, data []byte) {
	t.Helper()
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// readFile reads past the page cache, so the bytes cross the wire.
func readFile(t *testing.T, name string) []byte {
	t.Helper()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0o644)
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
