package sanity_test

// kubernetes-csi's csi-sanity suite (csi-test's sanity package) against the
// real binaries: pillar-agent on simulated storage, pillar-controller in
// standalone mode, pillar-node with the loop connector (the agent and
// node as pillar-agent-sim and pillar-node-sim: the product's Main with
// conformance/simnode's options), so staging runs real mkfs and mount on
// loop devices (root needed; the suite fails, not skips, without it). `make sanity` runs only this.

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kubernetes-csi/csi-test/v5/pkg/sanity"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
)

func TestSanity(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "csi-sanity")
}

var dir, _ = os.MkdirTemp("", "pillar-sanity-")

var config = func() sanity.TestConfig {
	c := sanity.NewTestConfig()
	c.Address = "unix://" + filepath.Join(dir, "node.sock")
	c.ControllerAddress = "unix://" + filepath.Join(dir, "controller.sock")
	c.TargetPath = filepath.Join(dir, "target")
	c.StagingPath = filepath.Join(dir, "staging")
	c.TestVolumeParameters = map[string]string{"store": "fast"}
	c.TestVolumeSize = 64 << 20
	c.TestVolumeExpandSize = 128 << 20
	c.IdempotentCount = 2
	// Snapshot specs run because the controller advertises
	// CREATE_DELETE_SNAPSHOT and LIST_SNAPSHOTS; snapshots take no
	// parameters (the source volume's store decides everything).
	c.TestSnapshotParameters = map[string]string{}
	return c
}()

var _ = SynchronizedBeforeSuite(func() {
	Expect(os.Geteuid()).To(BeZero(), "csi-sanity stages volumes on loop devices and mounts them: run as root")
	simRoot := filepath.Join(dir, "storage-node")
	agent := h.StartAgentAt(h.AgentOptions{
		Config:   "backends:\n  - zfs: {pool: tank, parentDataset: k8s}\n  - lvm: {volumeGroup: vg0, thinPool: thin}\n",
		SimRoot:  simRoot,
		PoolSize: "20G",
	}, dir)
	storesFile := filepath.Join(dir, "stores.yaml")
	Expect(os.WriteFile(storesFile, []byte(`stores:
  - name: fast
    agent: `+agent.Addr+`
    backend: {zfs: {pool: tank, parentDataset: k8s, properties: {compression: lz4}}}
  - name: bulk
    agent: `+agent.Addr+`
    backend: {lvm: {volumeGroup: vg0, thinPool: thin, provisioningMode: thin}}
`), 0o644)).To(Succeed())
	h.StartDaemon("pillar-controller", h.Bin("pillar-controller"), []string{"--standalone-stores", storesFile, "--csi-endpoint", config.ControllerAddress, "--log-level", "debug"})
	h.StartDaemon("pillar-node", h.Bin("pillar-node-sim"), []string{"--node-id", "sanity-node", "--csi-endpoint", config.Address,
		"--connector", "loop", "--sim-root", simRoot, "--state-dir", filepath.Join(dir, "node-state"), "--host-nqn-file", filepath.Join(dir, "hostnqn"), "--log-level", "debug"})
	for _, s := range []string{"controller.sock", "node.sock"} {
		Eventually(func() error { _, err := os.Stat(filepath.Join(dir, s)); return err }, 20*time.Second, 50*time.Millisecond).Should(Succeed())
	}
}, func() {})

var _ = SynchronizedAfterSuite(func() {}, func() {
	h.StopDaemons()
	os.RemoveAll(dir)
})

// csi-sanity checks CSI spec conformance, which no rule of the seed names;
// it stages on loop devices, not NVMe/TCP, so it carries no rule label.
var _ = Describe("pillar-csi", func() {
	sanity.GinkgoTest(&config)
})
