package node_test

// pillar-node on this machine with the loop connector (pillar-node-sim):
// real mkfs (ext4, xfs), real mounts, read-only publishing, raw block
// volumes, online expansion and clean teardown, driven through the CSI API of the real
// controller (standalone) and node binaries over a simulated agent.
// Needs root (loop devices, mounts): the suite fails, not skips, without.

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
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
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
	"github.com/pillarhq/pillar/sim/csisidecar"
	"github.com/pillarhq/pillar/sim/nvmeloop"
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
	storesFile string
	background = context.Background()
)

var _ = BeforeSuite(func() {
	Expect(os.Geteuid()).To(BeZero(), "the node suite attaches loop devices and mounts filesystems: run as root")
	dir = GinkgoT().TempDir()
	simRoot = filepath.Join(dir, "storage-node")
	agent := h.StartAgentAt(h.AgentOptions{Config: "backends:\n  - lvm: {volumeGroup: vg0, thinPool: thin}\n", SimRoot: simRoot, PoolSize: "8G"}, dir)
	storesFile = filepath.Join(dir, "stores.yaml")
	stores := storesFile
	Expect(os.WriteFile(stores, []byte("stores:\n  - name: fast\n    agent: "+agent.Addr+"\n    backend: {lvm: {volumeGroup: vg0, thinPool: thin, provisioningMode: thin}}\n"), 0o644)).To(Succeed())
	h.StartDaemon("pillar-controller", h.Bin("pillar-controller"), []string{"--standalone-stores", stores, "--csi-endpoint", "unix://" + dir + "/c.sock"})
	h.StartDaemon("pillar-node", h.Bin("pillar-node-sim"), []string{"--node-id", "worker-1", "--csi-endpoint", "unix://" + dir + "/n.sock",
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

// dialCSI waits for a CSI socket and dials it.
func dialCSI(sock string) *grpc.ClientConn {
	Eventually(func() error { _, err := os.Stat(sock); return err }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
	c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	return c
}

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
	return volumeFrom(name, cap, size, nil)
}

// volumeFrom is volume with a content source (a snapshot or a volume).
func volumeFrom(name string, cap *csi.VolumeCapability, size int64, src *csi.VolumeContentSource) (id string, pc map[string]string, staging string) {
	cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: name, Parameters: map[string]string{"store": "fast"},
		VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: size}, VolumeContentSource: src})
	Expect(err).NotTo(HaveOccurred())
	id = cv.Volume.VolumeId
	pub, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: nodeID, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	staging = filepath.Join(dir, name, "staging")
	Expect(os.MkdirAll(staging, 0o750)).To(Succeed())
	_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext, StagingTargetPath: staging,
		VolumeCapability: cap, VolumeContext: cv.Volume.VolumeContext})
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

// A second node with its own (empty) /etc/nvme: it writes an identity of
// its own at first start, so the per-host ACL tells the two nodes apart.
var _ = Describe("two nodes", Ordered, func() {
	var nodeB csi.NodeClient
	var nodeBID string
	var procB *h.Proc
	BeforeAll(func() {
		etcB := filepath.Join(dir, "node-b", "etc-nvme")
		procB = h.StartDaemon("pillar-node-b", h.Bin("pillar-node-sim"), []string{"--node-id", "worker-2", "--csi-endpoint", "unix://" + dir + "/nb.sock",
			"--connector", "loop", "--sim-root", simRoot, "--state-dir", dir + "/node-b/state",
			"--host-nqn-file", etcB + "/hostnqn", "--host-id-file", etcB + "/hostid"})
		Eventually(func() error { _, err := os.Stat(dir + "/nb.sock"); return err }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
		c, err := grpc.NewClient("unix://"+dir+"/nb.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		nodeB = csi.NewNodeClient(c)
		info, err := nodeB.NodeGetInfo(background, &csi.NodeGetInfoRequest{})
		Expect(err).NotTo(HaveOccurred())
		nodeBID = info.NodeId
		nqn, err := os.ReadFile(etcB + "/hostnqn")
		Expect(err).NotTo(HaveOccurred(), "the node writes its identity to the host directory")
		id, err := os.ReadFile(etcB + "/hostid")
		Expect(err).NotTo(HaveOccurred())
		Expect(nodeBID).To(Equal("worker-2/" + strings.TrimSpace(string(nqn))))
		Expect(strings.TrimSpace(string(nqn))).To(Equal("nqn.2014-08.org.nvmexpress:uuid:" + strings.TrimSpace(string(id))))
	})

	It("have different host NQNs, and node B cannot connect to a volume exported to node A", func() {
		Expect(strings.SplitN(nodeBID, "/", 2)[1]).NotTo(Equal(strings.SplitN(nodeID, "/", 2)[1]))
		cap := mountCap("ext4")
		id, pc, _ := volume("pvc-two-nodes", cap, 16<<20) // published and staged on node A
		_, err := nodeB.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pc,
			StagingTargetPath: filepath.Join(dir, "node-b", "staging"), VolumeCapability: cap})
		Expect(status.Code(err)).To(Equal(codes.Internal))
		Expect(err.Error()).To(ContainSubstring("not allowed"))
	})

	It("refuses to publish a single-node volume to node B while node A has it (FAILED_PRECONDITION), and allows it after unpublish", func() {
		cap := mountCap("ext4")
		cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-single-node", Parameters: map[string]string{"store": "fast"},
			VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
		Expect(err).NotTo(HaveOccurred())
		vid := cv.Volume.VolumeId
		DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: vid}) })
		_, err = ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeID, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		// Publishing again to the same node is idempotent.
		_, err = ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeID, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		_, err = ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeBID, VolumeCapability: cap})
		Expect(status.Code(err)).To(Equal(codes.FailedPrecondition), "%v", err)
		_, err = ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: nodeID})
		Expect(err).NotTo(HaveOccurred())
		pub, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeBID, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		staging := filepath.Join(dir, "node-b", "single")
		_, err = nodeB.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: vid, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		_, err = nodeB.NodeUnstageVolume(background, &csi.NodeUnstageVolumeRequest{VolumeId: vid, StagingTargetPath: staging})
		Expect(err).NotTo(HaveOccurred())
		_, err = ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: nodeBID})
		Expect(err).NotTo(HaveOccurred())
	})

	// Fencing: unpublishing takes the volume away from a node that is
	// still connected (a node that died with the volume staged, then
	// force-detached), not only from its future connects. Whether a
	// connection reaches the namespace is the simulated kernel's answer
	// (nvmeloop.Reaches: a controller lives as long as its port link).
	It("fences node A's live connection when the volume is unpublished from it, before node B gets the volume", func() {
		cap := mountCap("ext4")
		cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-fence", Parameters: map[string]string{"store": "fast"},
			VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
		Expect(err).NotTo(HaveOccurred())
		vid := cv.Volume.VolumeId
		DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: vid}) })
		pubA, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeID, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		stagingA := filepath.Join(dir, "fence", "a")
		_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: vid, PublishContext: pubA.PublishContext, StagingTargetPath: stagingA, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_, err := node.NodeUnstageVolume(background, &csi.NodeUnstageVolumeRequest{VolumeId: vid, StagingTargetPath: stagingA})
			Expect(err).NotTo(HaveOccurred())
		})
		nqn := pubA.PublishContext["nqn"]
		hostA := nvmeloop.New(simRoot, nvmet.DefaultRoot, dir+"/node-state")
		Expect(hostA.Reaches(nqn)).To(BeTrue(), "node A's connection reaches the namespace while published")

		// Node A stops answering; the attacher force-detaches.
		_, err = ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: nodeID})
		Expect(err).NotTo(HaveOccurred())
		Expect(hostA.Reaches(nqn)).To(BeFalse(), "node A's live connection still reaches the namespace after unpublish")

		pubB, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeBID, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		stagingB := filepath.Join(dir, "node-b", "fence")
		_, err = nodeB.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: vid, PublishContext: pubB.PublishContext, StagingTargetPath: stagingB, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		hostB := nvmeloop.New(simRoot, nvmet.DefaultRoot, dir+"/node-b/state")
		Expect(hostB.Reaches(nqn)).To(BeTrue())
		Expect(hostA.Reaches(nqn)).To(BeFalse(), "node A reaches the namespace again once node B has it")
		_, err = nodeB.NodeUnstageVolume(background, &csi.NodeUnstageVolumeRequest{VolumeId: vid, StagingTargetPath: stagingB})
		Expect(err).NotTo(HaveOccurred())
		_, err = ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: nodeBID})
		Expect(err).NotTo(HaveOccurred())
	})

	// The stand-in livenessprobe (sim/csisidecar) against the real node:
	// 200 while the plugin answers Probe, 500 once it is gone.
	It("is watched by the liveness stand-in as the real livenessprobe does: GET /healthz is 200, then 500 when the plugin stops", func() {
		c, err := grpc.NewClient("unix://"+dir+"/nb.sock", grpc.WithTransportCredentials(insecure.NewCredentials()))
		Expect(err).NotTo(HaveOccurred())
		srv := httptest.NewServer(&csisidecar.Liveness{Conn: c})
		DeferCleanup(srv.Close)
		get := func(path string) int {
			resp, err := http.Get(srv.URL + path)
			Expect(err).NotTo(HaveOccurred())
			resp.Body.Close()
			return resp.StatusCode
		}
		Expect(get("/healthz")).To(Equal(http.StatusOK))
		Expect(get("/metrics")).To(Equal(http.StatusNotFound))
		procB.Stop()
		Expect(get("/healthz")).To(Equal(http.StatusInternalServerError))
	})
})

var _ = It("refuses a staging path that holds another mount instead of reporting it staged", func() {
	cap := mountCap("ext4")
	cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-foreign-mount", Parameters: map[string]string{"store": "fast"},
		VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	Expect(err).NotTo(HaveOccurred())
	vid := cv.Volume.VolumeId
	DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: vid}) })
	pub, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeID, VolumeCapability: cap})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: nodeID})
	})
	staging := filepath.Join(dir, "foreign-mount", "staging")
	Expect(os.MkdirAll(staging, 0o750)).To(Succeed())
	Expect(unix.Mount("tmpfs", staging, "tmpfs", 0, "size=1m")).To(Succeed())
	DeferCleanup(func() {
		node.NodeUnstageVolume(background, &csi.NodeUnstageVolumeRequest{VolumeId: vid, StagingTargetPath: staging})
		unix.Unmount(staging, 0)
	})
	_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: vid, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: cap})
	Expect(status.Code(err)).To(Equal(codes.FailedPrecondition), "%v", err)
	Expect(err.Error()).To(ContainSubstring("not the volume's device"))
	src, fstype := mountSource(staging)
	Expect(fstype).To(Equal("tmpfs"), "the foreign mount (%s) is left as it was", src)
})

var _ = It("refuses StorageClass reconnect settings that are not seconds", func() {
	for _, params := range []map[string]string{{"store": "fast", "ctrlLossTmo": "-2"}, {"store": "fast", "reconnectDelay": "soon"}} {
		_, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-bad-reconnect", Parameters: params,
			VolumeCapabilities: []*csi.VolumeCapability{mountCap("ext4")}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
		Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%v: %v", params, err)
	}
	cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-reconnect", Parameters: map[string]string{"store": "fast", "ctrlLossTmo": "-1", "reconnectDelay": "5"},
		VolumeCapabilities: []*csi.VolumeCapability{mountCap("ext4")}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: cv.Volume.VolumeId}) })
	// The node reads them from the volume context.
	Expect(cv.Volume.VolumeContext).To(HaveKeyWithValue("ctrlLossTmo", "-1"))
	Expect(cv.Volume.VolumeContext).To(HaveKeyWithValue("reconnectDelay", "5"))
})

// loopsUnder counts the loop devices (the loop connector's connections)
// backed by a file of the simulated storage node.
func loopsUnder(root string) int {
	n := 0
	files, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err == nil && strings.HasPrefix(strings.TrimSpace(string(b)), root) {
			n++
		}
	}
	return n
}

var _ = DescribeTable("a stage that fails after connecting leaves no connection behind",
	func(name string, cap *csi.VolumeCapability, prepare func(staging string)) {
		cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: name, Parameters: map[string]string{"store": "fast"},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap("ext4")}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
		Expect(err).NotTo(HaveOccurred())
		vid := cv.Volume.VolumeId
		DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: vid}) })
		pub, err := ctrl.ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodeID, VolumeCapability: cap})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: nodeID})
		})
		staging := filepath.Join(dir, name, "staging")
		Expect(os.MkdirAll(staging, 0o750)).To(Succeed())
		prepare(staging)
		before := loopsUnder(simRoot)
		_, err = node.NodeStageVolume(background, &csi.NodeStageVolumeRequest{VolumeId: vid, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: cap})
		Expect(err).To(HaveOccurred())
		Expect(loopsUnder(simRoot)).To(Equal(before), "connections to the storage node after the failed stage")
		src, _ := mountSource(staging)
		Expect(src).NotTo(HavePrefix("/dev/loop"), "nothing of the volume is mounted")
	},
	Entry("mount fails (an option the filesystem refuses)", "pvc-stage-mount-fails",
		&csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4", MountFlags: []string{"no_such_option_pillar"}}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}},
		func(string) {}),
	Entry("the staging path holds another mount", "pvc-stage-foreign", mountCap("xfs"), func(staging string) {
		Expect(unix.Mount("tmpfs", staging, "tmpfs", 0, "size=1m")).To(Succeed())
		DeferCleanup(func() { unix.Unmount(staging, 0) })
	}),
	Entry("the staging path cannot be made (a file stands there)", "pvc-stage-no-dir", mountCap("ext4"), func(staging string) {
		Expect(os.Remove(staging)).To(Succeed())
		Expect(os.WriteFile(staging, nil, 0o644)).To(Succeed())
	}),
)

// Two controller replicas (each its own process, as in a Deployment with
// replicaCount 2) publish one single-node volume to two different nodes at
// the same instant, round after round: exactly one publish wins each round,
// because the agent checks the ACL and exports in one step under the
// volume's lock. The loser is refused either for the winner's host
// (FAILED_PRECONDITION) or, when it read the export before the winner
// changed it, for its stale generation (ABORTED; the attacher retries and
// then meets the first refusal).
var _ = It("lets exactly one of two publishes racing from two controller replicas to two nodes succeed", func() {
	h.StartDaemon("pillar-controller-2", h.Bin("pillar-controller"), []string{"--standalone-stores", storesFile, "--csi-endpoint", "unix://" + dir + "/c2.sock"})
	ctrl2 := csi.NewControllerClient(dialCSI(dir + "/c2.sock"))
	cap := mountCap("ext4")
	cv, err := ctrl.CreateVolume(background, &csi.CreateVolumeRequest{Name: "pvc-publish-race", Parameters: map[string]string{"store": "fast"},
		VolumeCapabilities: []*csi.VolumeCapability{cap}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
	Expect(err).NotTo(HaveOccurred())
	vid := cv.Volume.VolumeId
	DeferCleanup(func() { ctrl.DeleteVolume(background, &csi.DeleteVolumeRequest{VolumeId: vid}) })
	nodes := []string{
		"worker-a/nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-2222-4333-8444-555555555555",
		"worker-b/nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-2222-4333-8444-555555555555",
	}
	clients := []csi.ControllerClient{ctrl, ctrl2}
	for round := range 15 {
		start := make(chan struct{})
		errs := make([]error, 2)
		done := make(chan int)
		for i := range 2 {
			go func() {
				defer GinkgoRecover()
				<-start
				_, errs[i] = clients[i].ControllerPublishVolume(background, &csi.ControllerPublishVolumeRequest{VolumeId: vid, NodeId: nodes[i], VolumeCapability: cap})
				done <- i
			}()
		}
		close(start)
		<-done
		<-done
		won := 0
		for i, err := range errs {
			if err == nil {
				won++
				continue
			}
			Expect(status.Code(err)).To(BeElementOf(codes.FailedPrecondition, codes.Aborted), "round %d, node %d: %v", round, i, err)
		}
		Expect(won).To(Equal(1), "round %d: publishes that succeeded: %v", round, errs)
		for _, n := range nodes {
			_, err := ctrl.ControllerUnpublishVolume(background, &csi.ControllerUnpublishVolumeRequest{VolumeId: vid, NodeId: n})
			Expect(err).NotTo(HaveOccurred())
		}
	}
})

// fsUUID is the filesystem UUID blkid reads from a device.
func fsUUID(dev string) string {
	out, err := exec.Command("blkid", "-p", "-s", "UUID", "-o", "value", dev).CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "blkid %s: %s", dev, out)
	return strings.TrimSpace(string(out))
}

// A restored snapshot and a clone start as byte copies of their source,
// filesystem UUID included; XFS refuses to mount a filesystem whose UUID
// is mounted already, and two ext4 filesystems sharing one UUID confuse
// every tool that finds filesystems by it. Both copies are staged on the
// node where the source stays mounted.
var _ = DescribeTable("a restored snapshot and a clone are staged beside their mounted source",
	func(fs string) {
		cap := mountCap(fs)
		id, _, staging := volume("pvc-copy-src-"+fs, cap, 320<<20)
		Expect(os.WriteFile(filepath.Join(staging, "hello"), []byte("from the source"), 0o644)).To(Succeed())
		unix.Sync()
		snap, err := ctrl.CreateSnapshot(background, &csi.CreateSnapshotRequest{SourceVolumeId: id, Name: "copy-snap-" + fs})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_, err := ctrl.DeleteSnapshot(background, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId})
			Expect(err).NotTo(HaveOccurred())
		})
		_, _, restored := volumeFrom("pvc-copy-restored-"+fs, cap, 320<<20, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}})
		_, _, clone := volumeFrom("pvc-copy-clone-"+fs, cap, 320<<20, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}})
		uuids := map[string]string{}
		for _, p := range []string{staging, restored, clone} {
			b, err := os.ReadFile(filepath.Join(p, "hello"))
			Expect(err).NotTo(HaveOccurred(), "%s", p)
			Expect(string(b)).To(Equal("from the source"))
			dev, got := mountSource(p)
			Expect(got).To(Equal(fs))
			uuids[p] = fsUUID(dev)
		}
		if fs == "ext4" {
			Expect(uuids[restored]).NotTo(Equal(uuids[staging]), "the restored snapshot has a filesystem UUID of its own")
			Expect(uuids[clone]).NotTo(Equal(uuids[staging]), "the clone has a filesystem UUID of its own")
			Expect(uuids[clone]).NotTo(Equal(uuids[restored]))
		}
	},
	Entry("ext4", "ext4"),
	Entry("xfs", "xfs"),
)

// fsBytes is the size of the filesystem mounted at p.
func fsBytes(p string) int64 {
	var st unix.Statfs_t
	Expect(unix.Statfs(p, &st)).To(Succeed())
	return int64(st.Blocks) * st.Bsize
}

// A copy made at a larger size than its source (a claim restored from a
// snapshot, or cloned, with a larger request) has the larger device and,
// until grown, the source's filesystem: the stage grows it, as Kubernetes'
// storage suite expects ("should provision correct filesystem size when
// restoring snapshot to larger size pvc").
var _ = DescribeTable("a restored snapshot and a clone larger than their source are staged with the larger filesystem",
	func(fs string) {
		cap := mountCap(fs)
		id, _, staging := volume("pvc-grow-src-"+fs, cap, 320<<20)
		Expect(os.WriteFile(filepath.Join(staging, "hello"), []byte("from the source"), 0o644)).To(Succeed())
		unix.Sync()
		snap, err := ctrl.CreateSnapshot(background, &csi.CreateSnapshotRequest{SourceVolumeId: id, Name: "grow-snap-" + fs})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			_, err := ctrl.DeleteSnapshot(background, &csi.DeleteSnapshotRequest{SnapshotId: snap.Snapshot.SnapshotId})
			Expect(err).NotTo(HaveOccurred())
		})
		_, _, restored := volumeFrom("pvc-grow-restored-"+fs, cap, 640<<20, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Snapshot{
			Snapshot: &csi.VolumeContentSource_SnapshotSource{SnapshotId: snap.Snapshot.SnapshotId}}})
		_, _, clone := volumeFrom("pvc-grow-clone-"+fs, cap, 640<<20, &csi.VolumeContentSource{Type: &csi.VolumeContentSource_Volume{
			Volume: &csi.VolumeContentSource_VolumeSource{VolumeId: id}}})
		source := fsBytes(staging)
		for _, p := range []string{restored, clone} {
			Expect(fsBytes(p)).To(BeNumerically(">", source+256<<20), "%s: the filesystem of the 640 MiB copy of a 320 MiB volume", p)
			b, err := os.ReadFile(filepath.Join(p, "hello"))
			Expect(err).NotTo(HaveOccurred(), "%s", p)
			Expect(string(b)).To(Equal("from the source"))
		}
	},
	Entry("ext4", "ext4"),
	Entry("xfs", "xfs"),
)
