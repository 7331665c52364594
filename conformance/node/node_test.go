package node_test

// pillar-node on this machine with the loop connector: real mkfs (ext4,
// xfs), real mounts, read-only publishing, raw block volumes, online
// expansion and clean teardown, driven through the CSI API of the real
// controller (standalone) and node binaries over a simulated agent.
// Needs root (loop devices, mounts): the suite fails, not skips, without.

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	h "github.com/pillarhq/pillar/conformance/harness"
)

func TestNode(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "pillar-node on loop devices")
}

var (
	dir        string
	ctrl       csi.ControllerClient
	node       csi.NodeClient
	nodeID     string
	simRoot    string
	background = context.Background()
)

var _ = BeforeSuite(func() {
	Expect(os.Geteuid()).To(BeZero(), "the node suite attaches loop devices and mounts filesystems: run as root")
	dir = GinkgoT().TempDir()
	simRoot = filepath.Join(dir, "storage-node")
	agent := h.StartAgentAt(h.AgentOptions{Config: "backends:\n  - lvm: {volumeGroup: vg0, thinPool: thin}\n", SimRoot: simRoot, PoolSize: "8G"}, dir)
	stores := filepath.Join(dir, "stores.yaml")
	Expect(os.WriteFile(stores, []byte("stores:\n  - name: fast\n    agent: "+agent.Addr+"\n    backend: {lvm: {volumeGroup: vg0, thinPool: thin, provisioningMode: thin}}\n"), 0o644)).To(Succeed())
	h.StartDaemon("pillar-controller", h.Bin("pillar-controller"), []string{"--standalone-stores", stores, "--csi-endpoint", "unix://" + dir + "/c.sock"})
	h.StartDaemon("pillar-node", h.Bin("pillar-node"), []string{"--node-id", "worker-1", "--csi-endpoint", "unix://" + dir + "/n.sock",
		"--connector", "loop", "--sim-root", simRoot, "--state-dir", dir + "/node-state", "--host-nqn-file", dir + "/hostnqn"})
	dial := func(sock string) *grpc.ClientConn {
		Eventually(func() error { _, err := os.Stat(sock); return err }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		return c
	}
	ctrl = csi.NewControllerClient(dial(dir + "/c.sock"))
	node = csi.NewNodeClient(dial(dir + "/n.sock"))
	info, err := node.NodeGetInfo(background, &csi.NodeGetInfoRequest{})
	Expect(err).NotTo(HaveOccurred())
	nodeID = info.NodeId
	Expect(nodeID).To(HavePrefix("worker-1/nqn."))
})

var _ = AfterSuite(func() { h.StopDaemons() })

func mountCap(fs string) *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: fs}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
}

func blockCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
}

func mountSource(path string) (source, fstype string) {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 9 && f[4] == path {
			for i, x := range f {
				if x == "-" && i+2 < len(f) {
					return f[i+2], f[i+1]
				}
			}
		}
	}
	return "", ""
}

// volume creates and publishes a volume to this node, staged at a fresh
// path; cleanup unstages, unpublishes and deletes it.
func volume(name string, cap *csi.VolumeCapability, size int64) (id string, pc map[string]string, staging string) {
	cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: name, Parameters: map[string]string{"store": "fast"},
		VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: size}})
	Expect(err).NotTo(HaveOccurred())
	id = cv.Volume.VolumeId
	pub, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeID, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	staging = filepath.Join(dir, name, "staging")
	Expect(os.MkdirAll(staging, 0o750)).To(Succeed())
	_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		_, err := node.NodeUnstageVolume(background, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		Expect(err).NotTo(HaveOccurred())
		src, _ := mountSource(staging)
		Expect(src).To(BeEmpty(), "staging path still mounted")
		_, err = ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: nodeID})
		Expect(err).NotTo(HaveOccurred())
		_, err = ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: id})
		Expect(err).NotTo(HaveOccurred())
	})
	return id, pub.PublishContext, staging
}

func publish(id string, pc map[string]string, staging, target string, cap *csi.VolumeCapability, ro bool) {
	_, err := node.NodePublishVolume(background, &csi.NodePublishVolumeRequest{VolumeId: id, PublishContext: pc, StagingTargetPath: staging,
		TargetPath: target, VolumeCapability: cap, Readonly: ro})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		_, err := node.NodeUnpublishVolume(background, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target})
		Expect(err).NotTo(HaveOccurred())
		_, err = os.Stat(target)
		Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue(), "target path left behind")
	})
}

// Online growth is checked with xfs here: this machine's kernel refuses
// ext4's online resize (it needs CAP_SYS_RESOURCE, which this VM does not
// grant); the qemu run (make e2e-kernel) grows ext4 online on a real kernel.
var _ = DescribeTable("a filesystem volume is formatted once, published read-write and read-only, and grows online",
	func(fs string, grow bool) {
		cap := mountCap(fs)
		id, pc, staging := volume("pvc-"+fs, cap, 320<<20)
		src, got := mountSource(staging)
		Expect(src).To(HavePrefix("/dev/loop"))
		Expect(got).To(Equal(fs))

		rw, ro := filepath.Join(dir, fs, "pod-rw"), filepath.Join(dir, fs, "pod-ro")
		publish(id, pc, staging, rw, cap, false)
		Expect(os.WriteFile(filepath.Join(rw, "hello"), []byte("world"), 0o644)).To(Succeed())
		publish(id, pc, staging, ro, cap, true)
		b, err := os.ReadFile(filepath.Join(ro, "hello"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(b)).To(Equal("world"))
		err = os.WriteFile(filepath.Join(ro, "nope"), []byte("x"), 0o644)
		Expect(errors.Is(err, syscall.EROFS)).To(BeTrue(), "write through a read-only publish: %v", err)

		// Staging again (kubelet retries) neither reformats nor fails.
		_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pc, StagingTargetPath: staging, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		Expect(os.ReadFile(filepath.Join(rw, "hello"))).To(Equal([]byte("world")))

		if !grow {
			return
		}
		var before unix.Statfs_t
		Expect(unix.Statfs(rw, &before)).To(Succeed())
		ex, err := ctrl.ControllerExpandVolume(background, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 640 << 20}, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		Expect(ex.NodeExpansionRequired).To(BeTrue())
		_, err = node.NodeExpandVolume(background, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: rw, StagingTargetPath: staging, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		var after unix.Statfs_t
		Expect(unix.Statfs(rw, &after)).To(Succeed())
		Expect(int64(after.Blocks) * after.Bsize).To(BeNumerically(">", int64(before.Blocks)*before.Bsize+200<<20))
		st, err := node.NodeGetVolumeStats(background, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: rw})
		Expect(err).NotTo(HaveOccurred())
		Expect(st.Usage[0].Total).To(BeNumerically(">", 500<<20))
	},
	Entry("ext4", "ext4", false),
	Entry("xfs", "xfs", true),
)

var _ = It("publishes a raw block volume as a device file and grows it", func() {
	cap := blockCap()
	id, pc, staging := volume("pvc-block", cap, 64<<20)
	target := filepath.Join(dir, "block", "pod", "dev")
	publish(id, pc, staging, target, cap, false)
	f, err := os.OpenFile(target, os.O_RDWR, 0)
	Expect(err).NotTo(HaveOccurred())
	_, err = f.WriteAt([]byte("raw bytes"), 4096)
	Expect(err).NotTo(HaveOccurred())
	size, _ := f.Seek(0, 2)
	f.Close()
	Expect(size).To(BeNumerically(">=", 64<<20))
	ex, err := ctrl.ControllerExpandVolume(background, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 128 << 20}, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	Expect(ex.NodeExpansionRequired).To(BeFalse())
	_, err = node.NodeExpandVolume(background, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	st, err := node.NodeGetVolumeStats(background, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
	Expect(err).NotTo(HaveOccurred())
	Expect(st.Usage[0].Total).To(BeNumerically(">=", 128<<20))
})

var _ = It("refuses to stage for a host the agent did not allow", func() {
	cap := mountCap("ext4")
	cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-acl", Parameters: map[string]string{"store": "fast"},
		VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: cv.Volume.VolumeId}) })
	other := "worker-2/nqn.2014-08.org.nvmexpress:uuid:11111111-2222-4333-8444-555555555555"
	pub, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: cv.Volume.VolumeId, NodeId: other, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: cv.Volume.VolumeId, PublishContext: pub.PublishContext,
		StagingTargetPath: filepath.Join(dir, "acl"), VolumeCapability: cap})
	Expect(status.Code(err)).To(Equal(codes.Internal))
	Expect(err.Error()).To(ContainSubstring("not allowed"))
})
