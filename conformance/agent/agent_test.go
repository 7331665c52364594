package agent_test

// The real pillar-agent binary (pillar-agent-sim: the same Main with the
// simulators, on simulated storage with --sim-root): its
// configuration refusals, the gRPC API over both backends, exports that
// survive restarts, degraded health, and mTLS.

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	h "github.com/pillarhq/pillar/conformance/harness"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/mtls"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

func TestAgent(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "pillar-agent conformance")
}

const gib = int64(1) << 30
const mib = int64(1) << 20

const twoBackends = `backends:
  - zfs:
      pool: tank
      parentDataset: k8s/vols
  - lvm:
      volumeGroup: vg0
      thinPool: thinpool
`

const hostA = "nqn.2014-08.org.nvmexpress:uuid:0f6a5e0e-0000-4000-8000-00000000000a"
const hostB = "nqn.2014-08.org.nvmexpress:uuid:0f6a5e0e-0000-4000-8000-00000000000b"

func codeOf(err error) codes.Code { return status.Code(err) }

func checkConfig(text string) (string, error) {
	f := filepath.Join(GinkgoT().TempDir(), "config.yaml")
	Expect(os.WriteFile(f, []byte(text), 0o644)).To(Succeed())
	out, err := h.RunCommand(h.Bin("pillar-agent"), "--config", f, "--check-config")
	return out, err
}

var _ = Describe("Configuration", func() {
	It("accepts a valid file with --check-config and exits 0", Label("S-AG-2", "S-AG-4", "S-AG-5"), func() {
		out, err := checkConfig(twoBackends)
		Expect(err).NotTo(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("2 backend(s), valid"))
	})

	DescribeTable("refuses bad files, naming the offending path, and exits non-zero",
		func(text, path string) {
			out, err := checkConfig(text)
			Expect(err).To(HaveOccurred(), out)
			Expect(out).To(ContainSubstring(path))
		},
		Entry("no backends", Label("S-AG-1"), "backends: []\n", "backends"),
		Entry("neither zfs nor lvm", Label("S-AG-3"), "backends:\n  - {}\n", "backends[0]"),
		Entry("both zfs and lvm", Label("S-AG-3"), "backends:\n  - zfs: {pool: a}\n    lvm: {volumeGroup: b}\n", "backends[0]"),
		Entry("zfs properties", Label("S-AG-4"), "backends:\n  - zfs: {pool: a}\n  - zfs:\n      pool: b\n      properties: {compression: lz4}\n", "backends[1].zfs.properties"),
		Entry("zfs volumeType other than zvol", Label("S-AG-4"), "backends:\n  - zfs: {pool: a, volumeType: dataset}\n", "backends[0].zfs.volumeType"),
		Entry("lvm without volumeGroup", Label("S-AG-5"), "backends:\n  - lvm: {thinPool: t}\n", "backends[0].lvm.volumeGroup"),
		Entry("lvm bad provisioningMode", Label("S-AG-5"), "backends:\n  - lvm: {volumeGroup: v, provisioningMode: thick}\n", "backends[0].lvm.provisioningMode"),
		Entry("duplicate pool", Label("S-AG-7"), "backends:\n  - zfs: {pool: a}\n  - zfs: {pool: a}\n", "backends[1].zfs.pool"),
		Entry("pool and group names coincide", Label("S-AG-7"), "backends:\n  - zfs: {pool: a}\n  - lvm: {volumeGroup: a}\n", "backends[1].lvm.volumeGroup"),
		Entry("unknown key", Label("S-AG-8"), "backends:\n  - zfs: {pool: a, frobnicate: lz4}\n", "backends[0].zfs.frobnicate"),
	)

	It("refuses to start on an invalid file", Label("S-AG-1", "S-AG-8"), func() {
		f := filepath.Join(GinkgoT().TempDir(), "config.yaml")
		Expect(os.WriteFile(f, []byte("backends:\n  - zfs: {pool: a}\n    extra: 1\n"), 0o644)).To(Succeed())
		out, err := h.RunCommand(h.Bin("pillar-agent-sim"), "--config", f, "--listen", h.FreeAddr(), "--sim-root", GinkgoT().TempDir())
		Expect(err).To(HaveOccurred(), out)
		Expect(out).To(ContainSubstring("backends[0].extra"))
		Expect(out).NotTo(ContainSubstring("agent_started"))
	})
})

var _ = Describe("Volumes and exports", Label("S-AG-10"), func() {
	var a *h.Agent
	var c agentv1.AgentServiceClient

	BeforeEach(func() {
		a = h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G"})
		c = a.Client()
	})

	It("acts only on its own LVs in a shared volume group, and zeroes a new linear volume before use", func() {
		// Another user's LV in vg0, made with the (simulated) LVM tools.
		state := filepath.Join(a.SimRoot, "state")
		out, err := h.RunCommand(h.Bin("fakestorage"), "--state", state, "lvcreate", "-y", "-n", "someone-else", "-L", "8m", "vg0")
		Expect(err).NotTo(HaveOccurred(), out)
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-mine", SizeBytes: 8 * mib})
		Expect(err).NotTo(HaveOccurred())
		list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "vg0"})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Volumes).To(HaveLen(1))
		Expect(list.Volumes[0].Name).To(Equal("pvc-mine"))
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "vg0", Name: "someone-else"})
		Expect(codeOf(err)).To(Equal(codes.FailedPrecondition), "%v", err)
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "someone-else", SizeBytes: 8 * mib})
		Expect(codeOf(err)).To(Equal(codes.FailedPrecondition), "%v", err)
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "vg0", Name: "someone-else", AllowedHosts: []string{hostA}})
		Expect(codeOf(err)).To(Equal(codes.NotFound), "%v", err)
		out, err = h.RunCommand(h.Bin("fakestorage"), "--state", state, "lvs", "vg0/someone-else")
		Expect(err).NotTo(HaveOccurred(), "the foreign LV is still there: %s", out)

		// What a deleted linear volume wrote is not readable through the
		// next one placed on its extents.
		v, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-old", SizeBytes: 16 * mib, Parameters: map[string]string{"provisioningMode": "linear"}})
		Expect(err).NotTo(HaveOccurred())
		f, err := os.OpenFile(v.Volume.DevicePath, os.O_WRONLY, 0)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.WriteAt([]byte("old tenant"), 8*mib)
		Expect(err).NotTo(HaveOccurred())
		f.Close()
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "vg0", Name: "pvc-old"})
		Expect(err).NotTo(HaveOccurred())
		v, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-new", SizeBytes: 16 * mib, Parameters: map[string]string{"provisioningMode": "linear"}})
		Expect(err).NotTo(HaveOccurred())
		b := make([]byte, 10)
		f, err = os.Open(v.Volume.DevicePath)
		Expect(err).NotTo(HaveOccurred())
		_, err = f.ReadAt(b, 8*mib)
		f.Close()
		Expect(err).NotTo(HaveOccurred())
		Expect(b).To(Equal(make([]byte, 10)))
	})

	It("reports every configured pool with its layout, health and capacity", func() {
		resp, err := c.ListPools(h.Ctx(), &agentv1.ListPoolsRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Pools).To(HaveLen(2))
		tank, vg := resp.Pools[0], resp.Pools[1]
		Expect(tank.Name).To(Equal("tank"))
		Expect(tank.Kind).To(Equal(agentv1.BackendKind_BACKEND_KIND_ZFS))
		Expect(tank.Layout.ParentDataset).To(Equal("k8s/vols"))
		Expect(tank.Discovered && tank.Healthy).To(BeTrue(), tank.Reason)
		Expect(tank.TotalBytes).To(BeNumerically(">", 3*gib))
		Expect(vg.Name).To(Equal("vg0"))
		Expect(vg.Layout.ThinPool).To(Equal("thinpool"))
		Expect(vg.DefaultProvisioningMode).To(Equal("linear"))
		Expect(vg.Discovered && vg.Healthy).To(BeTrue(), vg.Reason)

		hr, err := c.GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(hr.Healthy).To(BeTrue(), strings.Join(hr.Reasons, "; "))
		Expect(hr.TargetReady).To(BeTrue())
	})

	It("creates idempotently on both backends and maps conflicts to gRPC codes", func() {
		z, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-z", SizeBytes: 100 * mib, Parameters: map[string]string{"compression": "lz4"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(z.Volume.Native).To(Equal("tank/k8s/vols/pvc-z"))
		Expect(z.Volume.SizeBytes).To(BeNumerically(">=", 100*mib))
		again, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-z", SizeBytes: 100 * mib, Parameters: map[string]string{"compression": "lz4"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Volume.SizeBytes).To(Equal(z.Volume.SizeBytes))

		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-z", SizeBytes: 300 * mib})
		Expect(codeOf(err)).To(Equal(codes.AlreadyExists), "%v", err)
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-huge", SizeBytes: 64 * gib})
		Expect(codeOf(err)).To(Equal(codes.ResourceExhausted), "%v", err)
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "bad/name", SizeBytes: mib})
		Expect(codeOf(err)).To(Equal(codes.InvalidArgument), "%v", err)
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "nowhere", Name: "pvc-x", SizeBytes: mib})
		Expect(codeOf(err)).To(Equal(codes.NotFound), "%v", err)
		Expect(err.Error()).To(ContainSubstring("tank, vg0"))
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-y", SizeBytes: 0})
		Expect(codeOf(err)).To(Equal(codes.InvalidArgument), "%v", err)

		lin, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-l", SizeBytes: 10 * mib})
		Expect(err).NotTo(HaveOccurred())
		Expect(lin.Volume.ProvisioningMode).To(Equal("linear"))
		thin, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-t", SizeBytes: 10 * mib, Parameters: map[string]string{"provisioningMode": "thin"}})
		Expect(err).NotTo(HaveOccurred())
		Expect(thin.Volume.ProvisioningMode).To(Equal("thin"))
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-t", SizeBytes: 10 * mib, Parameters: map[string]string{"provisioningMode": "linear"}})
		Expect(codeOf(err)).To(Equal(codes.AlreadyExists), "%v", err)
		// The agent has read vg0 by now and keeps its extent size only:
		// space is lvcreate's to refuse, and a retry of a create that
		// took the group's space finds its volume, not a shortage.
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-huge", SizeBytes: 64 * gib})
		Expect(codeOf(err)).To(Equal(codes.ResourceExhausted), "%v", err)
		cp, err := c.GetCapacity(h.Ctx(), &agentv1.GetCapacityRequest{Pool: "vg0"})
		Expect(err).NotTo(HaveOccurred())
		fill := cp.FreeBytes / mib * mib
		full, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-fill", SizeBytes: fill})
		Expect(err).NotTo(HaveOccurred())
		refill, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-fill", SizeBytes: fill})
		Expect(err).NotTo(HaveOccurred())
		Expect(refill.Volume.SizeBytes).To(Equal(full.Volume.SizeBytes))
		_, err = c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-more", SizeBytes: 4 * mib})
		Expect(codeOf(err)).To(Equal(codes.ResourceExhausted), "%v", err)
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "vg0", Name: "pvc-fill"})
		Expect(err).NotTo(HaveOccurred())

		list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{})
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, v := range list.Volumes {
			names = append(names, v.Pool+"/"+v.Name)
		}
		Expect(names).To(Equal([]string{"tank/pvc-z", "vg0/pvc-l", "vg0/pvc-t"}))
	})

	It("serialises concurrent creates of one volume: every caller gets the same volume", func() {
		var wg sync.WaitGroup
		sizes := make([]int64, 8)
		errs := make([]error, 8)
		for i := range sizes {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				r, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-race", SizeBytes: 20 * mib})
				errs[i] = err
				if err == nil {
					sizes[i] = r.Volume.SizeBytes
				}
			}()
		}
		wg.Wait()
		for i := range sizes {
			Expect(errs[i]).NotTo(HaveOccurred())
			Expect(sizes[i]).To(Equal(sizes[0]))
		}
	})

	It("exports with a host ACL, allows and denies hosts, expands, and deletes with the export", func() {
		_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-e", SizeBytes: 64 * mib})
		Expect(err).NotTo(HaveOccurred())
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-missing"})
		Expect(codeOf(err)).To(Equal(codes.NotFound), "%v", err)
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-e", AllowedHosts: []string{"not-an-nqn"}})
		Expect(codeOf(err)).To(Equal(codes.InvalidArgument), "%v", err)
		_, err = c.AllowHost(h.Ctx(), &agentv1.AllowHostRequest{Pool: "tank", Name: "pvc-e", HostNqn: hostA})
		Expect(codeOf(err)).To(Equal(codes.FailedPrecondition), "%v", err)

		ex, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-e", AllowedHosts: []string{hostA}})
		Expect(err).NotTo(HaveOccurred())
		uuid, nguid := nvmet.IDs("tank:pvc-e")
		Expect(ex.Export.Nqn).To(Equal(nvmet.NQN("tank:pvc-e")))
		Expect(ex.Export.Uuid).To(Equal(uuid))
		Expect(ex.Export.Nguid).To(Equal(nguid))
		Expect(ex.Export.Transport).To(Equal("tcp"))
		Expect(ex.Export.Port).To(Equal(int32(4420)))
		Expect(ex.Export.AllowedHosts).To(Equal([]string{hostA}))
		again, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-e", AllowedHosts: []string{hostA}})
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Export.Uuid).To(Equal(uuid))

		al, err := c.AllowHost(h.Ctx(), &agentv1.AllowHostRequest{Pool: "tank", Name: "pvc-e", HostNqn: hostB})
		Expect(err).NotTo(HaveOccurred())
		Expect(al.Export.AllowedHosts).To(ConsistOf(hostA, hostB))
		dn, err := c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "tank", Name: "pvc-e", HostNqn: hostA})
		Expect(err).NotTo(HaveOccurred())
		Expect(dn.Export.AllowedHosts).To(Equal([]string{hostB}))
		_, err = c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "tank", Name: "pvc-e", HostNqn: hostA})
		Expect(err).NotTo(HaveOccurred(), "deny is idempotent")

		grown, err := c.ExpandVolume(h.Ctx(), &agentv1.ExpandVolumeRequest{Pool: "tank", Name: "pvc-e", SizeBytes: 128 * mib})
		Expect(err).NotTo(HaveOccurred())
		Expect(grown.Volume.SizeBytes).To(BeNumerically(">=", 128*mib))
		Expect(grown.Volume.Export).NotTo(BeNil())
		same, err := c.ExpandVolume(h.Ctx(), &agentv1.ExpandVolumeRequest{Pool: "tank", Name: "pvc-e", SizeBytes: 64 * mib})
		Expect(err).NotTo(HaveOccurred())
		Expect(same.Volume.SizeBytes).To(Equal(grown.Volume.SizeBytes), "volumes never shrink")

		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "tank", Name: "pvc-e"})
		Expect(err).NotTo(HaveOccurred())
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "tank", Name: "pvc-e"})
		Expect(err).NotTo(HaveOccurred(), "delete is idempotent")
		list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "tank"})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Volumes).To(BeEmpty())
		Expect(os.ReadFile(filepath.Join(a.SimRoot, "configfs.json"))).NotTo(ContainSubstring("pvc-e"))
	})

	for _, crash := range []bool{false, true} {
		It(fmt.Sprintf("keeps exports across an agent restart (crash=%v)", crash), func() {
			_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-keep", SizeBytes: 16 * mib})
			Expect(err).NotTo(HaveOccurred())
			ex, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "vg0", Name: "pvc-keep", AllowedHosts: []string{hostA}})
			Expect(err).NotTo(HaveOccurred())

			a.Restart(crash)
			Expect(h.LogEvents(a.Proc, "msg", "exports_recovered")).To(ContainElement(HaveKeyWithValue("count", BeNumerically("==", 1))))
			c = a.Client()
			list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "vg0"})
			Expect(err).NotTo(HaveOccurred())
			Expect(list.Volumes).To(HaveLen(1))
			Expect(list.Volumes[0].Export).NotTo(BeNil())
			Expect(list.Volumes[0].Export.Uuid).To(Equal(ex.Export.Uuid))
			Expect(list.Volumes[0].Export.AllowedHosts).To(Equal([]string{hostA}))
			// Exporting again after the restart changes nothing.
			again, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "vg0", Name: "pvc-keep", AllowedHosts: []string{hostA}})
			Expect(err).NotTo(HaveOccurred())
			Expect(again.Export.Nguid).To(Equal(ex.Export.Nguid))
		})
	}
})

var _ = Describe("Health", func() {
	It("answers the kubelet's liveness probe on plain HTTP while it serves", func() {
		addr := h.FreeAddr()
		h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G", Args: []string{"--health-listen", addr}})
		Eventually(func() (int, error) {
			resp, err := http.Get("http://" + addr + "/healthz")
			if err != nil {
				return 0, err
			}
			resp.Body.Close()
			return resp.StatusCode, nil
		}, 10*time.Second, 50*time.Millisecond).Should(Equal(http.StatusOK))
	})

	It("is degraded, naming the pool, when a configured pool is missing", func() {
		a := h.StartAgent(h.AgentOptions{Config: twoBackends})
		a.Storage("add-vg", "vg0", "1G")
		a.Storage("add-thinpool", "vg0", "thinpool", "256M")
		hr, err := a.Client().GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(hr.Healthy).To(BeFalse())
		Expect(strings.Join(hr.Reasons, "\n")).To(ContainSubstring("pool tank"))
		Expect(hr.Pools[0].Discovered).To(BeFalse())
		Expect(hr.Pools[1].Healthy).To(BeTrue(), hr.Pools[1].Reason)
		_, err = a.Client().CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-1", SizeBytes: mib})
		Expect(codeOf(err)).To(Equal(codes.Unavailable), "%v", err)
	})

	It("reports no discovered pools when host devices are denied (unprivileged container)", Label("S-AG-12"), func() {
		a := h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "1G"})
		a.Storage("deny-devices", "on")
		hr, err := a.Client().GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(hr.Healthy).To(BeFalse())
		for _, p := range hr.Pools {
			Expect(p.Discovered).To(BeFalse(), p.Name)
			Expect(p.Reason).NotTo(BeEmpty())
		}
	})

	It("reports a layout that differs from the node (thin pool missing) as not discovered", Label("S-AG-9"), func() {
		a := h.StartAgent(h.AgentOptions{Config: "backends:\n  - lvm: {volumeGroup: vg1, thinPool: nothere}\n"})
		a.Storage("add-vg", "vg1", "1G")
		resp, err := a.Client().ListPools(h.Ctx(), &agentv1.ListPoolsRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(resp.Pools[0].Discovered).To(BeFalse())
		Expect(resp.Pools[0].Reason).To(ContainSubstring("nothere"))
	})
})

var _ = Describe("mTLS", func() {
	var authority *h.CA
	var a *h.Agent
	var clientDir string

	BeforeEach(func() {
		authority = h.NewCA("pillar-test-ca")
		dir := GinkgoT().TempDir()
		serverDir := authority.Issue(filepath.Join(dir, "agent"), "agent", []string{"pillar-agent.storage.svc"}, "127.0.0.1")
		clientDir = authority.Issue(filepath.Join(dir, "controller"), "controller", nil)
		a = h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "1G", MTLSDir: serverDir})
	})

	It("accepts a controller presenting a certificate of the CA, checking the node IP or the configured server name", func() {
		cfg, err := mtls.Client(clientDir, "")
		Expect(err).NotTo(HaveOccurred())
		_, err = a.ClientTLS(cfg).GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(err).NotTo(HaveOccurred())

		named, err := mtls.Client(clientDir, "pillar-agent.storage.svc")
		Expect(err).NotTo(HaveOccurred())
		_, err = a.ClientTLS(named).GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(err).NotTo(HaveOccurred())
	})

	It("refuses plaintext, clients without a certificate, certificates of another CA and a wrong server name", func() {
		_, err := a.Client().GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(codeOf(err)).To(Equal(codes.Unavailable), "plaintext: %v", err)

		_, err = a.ClientTLS(authority.PlainTLS()).GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(codeOf(err)).To(Equal(codes.Unavailable), "no client certificate: %v", err)

		other := h.NewCA("other-ca")
		strangerDir := other.Issue(filepath.Join(GinkgoT().TempDir(), "stranger"), "stranger", nil)
		// The stranger trusts the agent's CA but presents a certificate of its own CA.
		Expect(os.WriteFile(filepath.Join(strangerDir, "ca.crt"), authority.PEM, 0o600)).To(Succeed())
		stranger, err := mtls.Client(strangerDir, "")
		Expect(err).NotTo(HaveOccurred())
		_, err = a.ClientTLS(stranger).GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(codeOf(err)).To(Equal(codes.Unavailable), "foreign client certificate: %v", err)

		wrong, err := mtls.Client(clientDir, "somewhere-else.example")
		Expect(err).NotTo(HaveOccurred())
		_, err = a.ClientTLS(wrong).GetHealth(h.Ctx(), &agentv1.GetHealthRequest{})
		Expect(codeOf(err)).To(Equal(codes.Unavailable), "wrong server name: %v", err)
		Expect(err.Error()).To(ContainSubstring("certificate"))
	})
})
