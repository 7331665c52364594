package agent_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"

	h "github.com/pillarhq/pillar/conformance/harness"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
)

// Snapshots over the real agent's gRPC API on simulated storage: the
// status codes a controller acts on (docs/decisions.md, "Snapshots and
// clones"). Data round trips are the shared backend suite's.
var _ = Describe("Snapshots and clones", func() {
	var (
		a *h.Agent
		c agentv1.AgentServiceClient
	)

	BeforeEach(func() {
		a = h.StartAgent(h.AgentOptions{Config: twoBackends, PoolSize: "4G"})
		c = a.Client()
	})

	create := func(pool, name string, size int64, params map[string]string, src *agentv1.VolumeSource) (*agentv1.Volume, error) {
		r, err := c.CreateVolume(h.Ctx(), &agentv1.CreateVolumeRequest{Pool: pool, Name: name, SizeBytes: size, Parameters: params, Source: src})
		return r.GetVolume(), err
	}
	fromSnap := func(n string) *agentv1.VolumeSource {
		return &agentv1.VolumeSource{Source: &agentv1.VolumeSource_Snapshot{Snapshot: n}}
	}
	fromVol := func(n string) *agentv1.VolumeSource {
		return &agentv1.VolumeSource{Source: &agentv1.VolumeSource_Volume{Volume: n}}
	}

	It("snapshots and restores on ZFS; a deleted snapshot is gone at once and ZFS drops it with its last restored volume", func() {
		src, err := create("tank", "pvc-src", 64*mib, nil, nil)
		Expect(err).NotTo(HaveOccurred())
		s, err := c.CreateSnapshot(h.Ctx(), &agentv1.CreateSnapshotRequest{Pool: "tank", Name: "snap-a", SourceVolume: "pvc-src"})
		Expect(err).NotTo(HaveOccurred())
		Expect(s.Snapshot).To(HaveField("Native", "tank/k8s/vols/pvc-src@snap-a"))
		Expect(s.Snapshot.SizeBytes).To(Equal(src.SizeBytes))
		Expect(s.Snapshot.CreationUnix).To(BeNumerically(">", 0))
		_, err = c.CreateSnapshot(h.Ctx(), &agentv1.CreateSnapshotRequest{Pool: "tank", Name: "snap-a", SourceVolume: "pvc-other"})
		Expect(codeOf(err)).To(Equal(codes.AlreadyExists), "%v", err)
		_, err = c.CreateSnapshot(h.Ctx(), &agentv1.CreateSnapshotRequest{Pool: "tank", Name: "snap-b", SourceVolume: "pvc-missing"})
		Expect(codeOf(err)).To(Equal(codes.NotFound), "%v", err)

		r, err := create("tank", "pvc-restored", 128*mib, map[string]string{"compression": "lz4"}, fromSnap("snap-a"))
		Expect(err).NotTo(HaveOccurred())
		Expect(r.SizeBytes).To(Equal(128 * mib))
		_, err = create("tank", "pvc-small", 16*mib, nil, fromSnap("snap-a"))
		Expect(codeOf(err)).To(Equal(codes.OutOfRange), "%v", err)
		_, err = create("tank", "pvc-none", 0, nil, fromSnap("snap-missing"))
		Expect(codeOf(err)).To(Equal(codes.NotFound), "%v", err)
		_, err = create("tank", "pvc-restored", 0, nil, fromVol("pvc-src"))
		Expect(codeOf(err)).To(Equal(codes.AlreadyExists), "%v", err)

		list, err := c.ListSnapshots(h.Ctx(), &agentv1.ListSnapshotsRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Snapshots).To(HaveLen(1))
		Expect(list.Snapshots[0]).To(HaveField("SourceVolume", "pvc-src"))

		// The external storage suite's order: the snapshot goes while the
		// volume restored from it (larger than it) lives.
		for i := 0; i < 2; i++ {
			_, err = c.DeleteSnapshot(h.Ctx(), &agentv1.DeleteSnapshotRequest{Pool: "tank", Name: "snap-a"})
			Expect(err).NotTo(HaveOccurred(), "delete #%d", i+1)
		}
		list, err = c.ListSnapshots(h.Ctx(), &agentv1.ListSnapshotsRequest{})
		Expect(err).NotTo(HaveOccurred())
		Expect(list.Snapshots).To(BeEmpty())
		_, err = create("tank", "pvc-late", 0, nil, fromSnap("snap-a"))
		Expect(codeOf(err)).To(Equal(codes.NotFound), "%v", err)
		zfsSnaps := func() string {
			return a.Storage("zfs", "list", "-H", "-t", "snapshot", "-o", "name,defer_destroy", "-r", "tank")
		}
		Expect(zfsSnaps()).To(Equal("tank/k8s/vols/pvc-src@snap-a\ton\n"), "ZFS keeps the snapshot for its clone, marked")
		vols, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "tank"})
		Expect(err).NotTo(HaveOccurred())
		Expect(vols.Volumes).To(ContainElement(HaveField("Name", "pvc-restored")))

		// The source holds the kept snapshot until the restored volume goes.
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "tank", Name: "pvc-src"})
		Expect(codeOf(err)).To(Equal(codes.FailedPrecondition), "%v", err)
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "tank", Name: "pvc-restored"})
		Expect(err).NotTo(HaveOccurred())
		Expect(zfsSnaps()).To(BeEmpty(), "the last clone took the deferred snapshot with it")
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "tank", Name: "pvc-src"})
		Expect(err).NotTo(HaveOccurred())
	})

	It("snapshots thin LVs independently of their origin and refuses linear ones with INVALID_ARGUMENT", func() {
		thin := map[string]string{"provisioningMode": "thin"}
		_, err := create("vg0", "pvc-thin", 64*mib, thin, nil)
		Expect(err).NotTo(HaveOccurred())
		_, err = c.CreateSnapshot(h.Ctx(), &agentv1.CreateSnapshotRequest{Pool: "vg0", Name: "snap-t", SourceVolume: "pvc-thin"})
		Expect(err).NotTo(HaveOccurred())
		_, err = c.DeleteVolume(h.Ctx(), &agentv1.DeleteVolumeRequest{Pool: "vg0", Name: "pvc-thin"})
		Expect(err).NotTo(HaveOccurred())
		r, err := create("vg0", "pvc-back", 128*mib, thin, fromSnap("snap-t"))
		Expect(err).NotTo(HaveOccurred())
		Expect(r.SizeBytes).To(Equal(128 * mib))
		Expect(r.ProvisioningMode).To(Equal("thin"))
		_, err = c.DeleteSnapshot(h.Ctx(), &agentv1.DeleteSnapshotRequest{Pool: "vg0", Name: "snap-t"})
		Expect(err).NotTo(HaveOccurred())

		_, err = create("vg0", "pvc-lin", 16*mib, map[string]string{"provisioningMode": "linear"}, nil)
		Expect(err).NotTo(HaveOccurred())
		_, err = c.CreateSnapshot(h.Ctx(), &agentv1.CreateSnapshotRequest{Pool: "vg0", Name: "snap-l", SourceVolume: "pvc-lin"})
		Expect(codeOf(err)).To(Equal(codes.InvalidArgument), "%v", err)
		Expect(err.Error()).To(ContainSubstring("thin"))
		_, err = create("vg0", "pvc-lin-copy", 0, map[string]string{"provisioningMode": "linear"}, fromVol("pvc-back"))
		Expect(codeOf(err)).To(Equal(codes.InvalidArgument), "%v", err)

		vols, err := c.ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "vg0"})
		Expect(err).NotTo(HaveOccurred())
		var names []string
		for _, v := range vols.Volumes {
			names = append(names, v.Name)
		}
		Expect(names).To(Equal([]string{"pvc-back", "pvc-lin"}))
	})
})
