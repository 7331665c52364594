package agent_test

import (
	"os"
	"path/filepath"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"

	h "github.com/pillarhq/pillar/conformance/harness"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
)

// A publication's generation (docs/pillar-csi.md, "Fencing"): every change
// of an export's hosts advances it, and a request decided on an older one
// is refused, so a publish or unpublish overtaken by a later publication
// (a deposed leader's, a retry arriving late) cannot undo it.
var _ = Describe("Export generations", func() {
	It("refuses export, allow, deny and unexport decided on an older generation (ABORTED), changes nothing, and counts them and the fence", func() {
		addr := h.FreeAddr()
		a := h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G", Args: []string{"--metrics-listen", addr}})
		c := a.Client()
		_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "vg0", Name: "pvc-gen", SizeBytes: 64 * mib})
		Expect(err).NotTo(HaveOccurred())

		// Published to node A.
		ex, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "vg0", Name: "pvc-gen", AllowedHosts: []string{hostA}, SingleHost: true})
		Expect(err).NotTo(HaveOccurred())
		seenByOld := ex.Export.Generation
		Expect(seenByOld).To(BeNumerically(">", 0))
		// Node A dies; a new leader force-detaches it and publishes to B,
		// each step on the generation it read.
		dn, err := c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "vg0", Name: "pvc-gen", HostNqn: hostA, Generation: seenByOld})
		Expect(err).NotTo(HaveOccurred())
		Expect(dn.Export.Generation).To(BeNumerically(">", seenByOld))
		ex, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "vg0", Name: "pvc-gen", AllowedHosts: []string{hostB}, SingleHost: true, Generation: dn.Export.Generation})
		Expect(err).NotTo(HaveOccurred())
		current := ex.Export.Generation
		Expect(current).To(BeNumerically(">", dn.Export.Generation))
		configfs := func() string {
			b, err := os.ReadFile(filepath.Join(a.SimRoot, "configfs.json"))
			Expect(err).NotTo(HaveOccurred())
			return string(b)
		}
		before := configfs()

		// The old leader's calls, decided before all that, arrive now.
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "vg0", Name: "pvc-gen", AllowedHosts: []string{hostA}, Generation: seenByOld})
		Expect(codeOf(err)).To(Equal(codes.Aborted), "%v", err)
		Expect(err.Error()).To(ContainSubstring("stale request"))
		_, err = c.AllowHost(h.Ctx(), &agentv1.AllowHostRequest{Pool: "vg0", Name: "pvc-gen", HostNqn: hostA, Generation: seenByOld})
		Expect(codeOf(err)).To(Equal(codes.Aborted), "%v", err)
		_, err = c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "vg0", Name: "pvc-gen", HostNqn: hostB, Generation: seenByOld})
		Expect(codeOf(err)).To(Equal(codes.Aborted), "%v", err)
		_, err = c.UnexportVolume(h.Ctx(), &agentv1.UnexportVolumeRequest{Pool: "vg0", Name: "pvc-gen", Generation: seenByOld})
		Expect(codeOf(err)).To(Equal(codes.Aborted), "%v", err)

		// Nothing changed: B alone is allowed, at the same generation.
		Expect(configfs()).To(Equal(before))
		list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "vg0"})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Volumes).To(HaveLen(1))
		Expect(list.Volumes[0].Export.AllowedHosts).To(Equal([]string{hostB}))
		Expect(list.Volumes[0].Export.Generation).To(Equal(current))

		// The current generation, and no generation at all, still work.
		al, err := c.AllowHost(h.Ctx(), &agentv1.AllowHostRequest{Pool: "vg0", Name: "pvc-gen", HostNqn: hostA, Generation: current})
		Expect(err).NotTo(HaveOccurred())
		Expect(al.Export.AllowedHosts).To(ConsistOf(hostA, hostB))
		_, err = c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "vg0", Name: "pvc-gen", HostNqn: hostA})
		Expect(err).NotTo(HaveOccurred())

		m := scrape(addr)
		Expect(m.Series("pillar_agent_fences_total")).To(HaveKeyWithValue("", 2.0), "node A denied twice")
		stale := m.Series("pillar_agent_stale_requests_total")
		for _, method := range []string{"ExportVolume", "AllowHost", "DenyHost", "UnexportVolume"} {
			Expect(stale).To(HaveKeyWithValue("method="+method, 1.0), method)
		}
	})

	It("still refuses a request decided before the agent restarted (the generations are on the node's disk)", func() {
		a := h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G"})
		c := a.Client()
		_, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: "tank", Name: "pvc-restart", SizeBytes: 64 * mib})
		Expect(err).NotTo(HaveOccurred())
		ex, err := c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-restart", AllowedHosts: []string{hostA}, SingleHost: true})
		Expect(err).NotTo(HaveOccurred())
		seenByOld := ex.Export.Generation
		// The newer publication: A force-detached, B attached.
		dn, err := c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "tank", Name: "pvc-restart", HostNqn: hostA, Generation: seenByOld})
		Expect(err).NotTo(HaveOccurred())
		ex, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-restart", AllowedHosts: []string{hostB}, SingleHost: true, Generation: dn.Export.Generation})
		Expect(err).NotTo(HaveOccurred())
		current := ex.Export.Generation

		// The agent crashes and comes back; its exports are in the target,
		// its generations in its state directory.
		a.Restart(true)
		Expect(h.LogEvents(a.Proc, "msg", "exports_recovered")).To(ContainElement(HaveKeyWithValue("generations", BeNumerically("==", 1))))
		c = a.Client()
		list, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "tank"})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Volumes).To(HaveLen(1))
		Expect(list.Volumes[0].Export.Generation).To(Equal(current), "the restarted agent reports the generation it had")

		// The old leader's unpublish of B and publish to A, decided before.
		_, err = c.DenyHost(h.Ctx(), &agentv1.DenyHostRequest{Pool: "tank", Name: "pvc-restart", HostNqn: hostB, Generation: seenByOld})
		Expect(codeOf(err)).To(Equal(codes.Aborted), "%v", err)
		_, err = c.ExportVolume(h.Ctx(), &agentv1.ExportVolumeRequest{Pool: "tank", Name: "pvc-restart", AllowedHosts: []string{hostA}, Generation: seenByOld})
		Expect(codeOf(err)).To(Equal(codes.Aborted), "%v", err)
		list, err = c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "tank"})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Volumes[0].Export.AllowedHosts).To(Equal([]string{hostB}), "B is still the only host")

		// Deleting the volume drops its generation; the file stays small.
		_, err = c.UnexportVolume(h.Ctx(), &agentv1.UnexportVolumeRequest{Pool: "tank", Name: "pvc-restart", Generation: current})
		Expect(err).NotTo(HaveOccurred())
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "tank", Name: "pvc-restart"})
		Expect(err).NotTo(HaveOccurred())
		a.Restart(false)
		Expect(h.LogEvents(a.Proc, "msg", "exports_recovered")).To(ContainElement(HaveKeyWithValue("generations", BeNumerically("==", 0))))
	})
})
