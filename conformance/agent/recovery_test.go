package agent_test

// Issue 20.2 and 20.8 on the real binary: a storage node's reboot (the
// agent killed and started on an empty target) and the controller's
// export recovery, and the agent's Prometheus metrics.

import (
	"io"
	"net/http"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	h "github.com/pillarhq/pillar/conformance/harness"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/kubecontroller"
	"github.com/pillarhq/pillar/impl/testing/promtest"
)

var _ = Describe("Storage node reboot", func() {
	It("loses the exports with the target, and the controller's recovery restores them with their hosts and identities", func() {
		a := h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G"})
		c := a.Client()
		exports := map[string]*agentv1.Export{}
		for _, v := range []struct{ pool, name, host string }{{"tank", "pvc-r1", hostA}, {"vg0", "pvc-r2", hostB}} {
			_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: v.pool, Name: v.name, SizeBytes: 16 * mib})
			Expect(err).NotTo(HaveOccurred())
			ex, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: v.pool, Name: v.name, AllowedHosts: []string{v.host}})
			Expect(err).NotTo(HaveOccurred())
			exports[v.name] = ex.Export
		}
		// pvc-idle exists but is attached nowhere: it stays unexported.
		_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-idle", SizeBytes: 16 * mib})
		Expect(err).NotTo(HaveOccurred())

		a.Reboot()
		Expect(h.LogEvents(a.Proc, "msg", "exports_recovered")).To(ContainElement(HaveKeyWithValue("count", BeNumerically("==", 0))))
		c = a.Client()
		list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Volumes).To(HaveLen(3), "the volumes survive the reboot")
		for _, v := range list.Volumes {
			Expect(v.Export).To(BeNil(), "%s is still exported after the target was emptied", v.Name)
		}

		// What the controller finds in Kubernetes' VolumeAttachments.
		attached := []kubecontroller.Attached{
			{Volume: csiids.Volume{Store: "fast", Pool: "tank", Name: "pvc-r1"}, Hosts: []string{hostA}},
			{Volume: csiids.Volume{Store: "bulk", Pool: "vg0", Name: "pvc-r2"}, Hosts: []string{hostB}},
		}
		restored, err := kubecontroller.RestoreExports(h.Ctx(), c, attached)
		Expect(err).NotTo(HaveOccurred())
		Expect(restored).To(ConsistOf("fast/tank/pvc-r1", "bulk/vg0/pvc-r2"))
		list, err = c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{})
		Expect(err).NotTo(HaveOccurred())
		for _, v := range list.Volumes {
			if v.Name == "pvc-idle" {
				Expect(v.Export).To(BeNil())
				continue
			}
			want := exports[v.Name]
			Expect(v.Export).NotTo(BeNil(), v.Name)
			// The node reconnects to the same subsystem and namespace.
			Expect(v.Export.Nqn).To(Equal(want.Nqn))
			Expect(v.Export.Uuid).To(Equal(want.Uuid))
			Expect(v.Export.Nguid).To(Equal(want.Nguid))
			Expect(v.Export.AllowedHosts).To(Equal(want.AllowedHosts))
		}
		// A second pass finds every export in place and changes nothing.
		restored, err = kubecontroller.RestoreExports(h.Ctx(), c, attached)
		Expect(err).NotTo(HaveOccurred())
		Expect(restored).To(BeEmpty())
	})
})

// scrape reads the agent's /metrics.
func scrape(addr string) promtest.Families {
	resp, err := http.Get("http://" + addr + "/metrics")
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	Expect(resp.StatusCode).To(Equal(http.StatusOK))
	body, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	fams, err := promtest.Parse(body)
	Expect(err).NotTo(HaveOccurred(), string(body))
	return fams
}

var _ = Describe("Metrics", func() {
	It("serves pool capacity, exports and call durations on --metrics-listen", func() {
		addr := h.FreeAddr()
		a := h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G", Args: []string{"--metrics-listen", addr}})
		c := a.Client()
		m := scrape(addr)
		Expect(m.Series("pillar_agent_exports")).To(HaveKeyWithValue("", 0.0))
		Expect(m.Series("pillar_agent_target_ready")).To(HaveKeyWithValue("", 1.0))
		freeBefore := m.Series("pillar_agent_pool_free_bytes")["kind=zfs,pool=tank"]
		Expect(freeBefore).To(BeNumerically(">", 3*gib))
		Expect(m.Series("pillar_agent_pool_total_bytes")).To(HaveKey("kind=lvm,pool=vg0"))
		Expect(m.Series("pillar_agent_pool_healthy")).To(And(HaveKeyWithValue("kind=zfs,pool=tank", 1.0), HaveKeyWithValue("kind=lvm,pool=vg0", 1.0)))
		// The thin pool's metadata usage, and no such series for ZFS.
		Expect(m.Series("pillar_agent_thin_pool_metadata_used_ratio")).To(Equal(map[string]float64{"pool=vg0,thin_pool=thinpool": 0}))

		_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-m", SizeBytes: 256 * mib})
		Expect(err).NotTo(HaveOccurred())
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-m", AllowedHosts: []string{hostA}})
		Expect(err).NotTo(HaveOccurred())
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-missing"})
		Expect(err).To(HaveOccurred())

		m = scrape(addr)
		Expect(m.Series("pillar_agent_exports")).To(HaveKeyWithValue("", 1.0))
		Expect(m.Series("pillar_agent_pool_free_bytes")["kind=zfs,pool=tank"]).To(BeNumerically("<=", freeBefore-float64(256*mib)))
		total := m.Series("pillar_agent_pool_total_bytes")["kind=zfs,pool=tank"]
		Expect(m.Series("pillar_agent_pool_used_bytes")["kind=zfs,pool=tank"]).To(Equal(total - m.Series("pillar_agent_pool_free_bytes")["kind=zfs,pool=tank"]))
		ops := m.Series("pillar_agent_operations_seconds")
		Expect(ops).To(HaveKeyWithValue("grpc_status_code=OK,method=CreateVolume", 1.0))
		Expect(ops).To(HaveKeyWithValue("grpc_status_code=OK,method=ExportVolume", 1.0))
		Expect(ops).To(HaveKeyWithValue("grpc_status_code=NotFound,method=ExportVolume", 1.0))

		// After a reboot the gauge shows the emptied target.
		a.Reboot()
		Expect(scrape(addr).Series("pillar_agent_exports")).To(HaveKeyWithValue("", 0.0))
	})
})
