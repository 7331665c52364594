package charts_test

import (
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	rbacv1 "k8s.io/api/rbac/v1"
)

// Volume snapshots are opt-in (they need the cluster's snapshot CRDs and
// snapshot-controller): the default render has no snapshotter, no rights
// on VolumeSnapshotContents beyond reading, and no VolumeSnapshotClass.
var _ = Describe("pillar-csi chart snapshots", func() {
	snapshotterRule := rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents"},
		Verbs: []string{"get", "list", "watch", "create", "update", "patch", "delete"}}

	It("renders no snapshotter, snapshot rights or VolumeSnapshotClass by default", func() {
		objs := render(nil)
		for _, o := range objs {
			Expect(o.Kind).NotTo(Equal("VolumeSnapshotClass"))
		}
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		for _, c := range dep.Spec.Template.Spec.Containers {
			Expect(c.Name).NotTo(Equal("csi-snapshotter"))
		}
		role := decode[rbacv1.ClusterRole](find(objs, "ClusterRole", "pillar-pillar-csi-controller"))
		Expect(role.Rules).NotTo(ContainElement(snapshotterRule))
	})

	It("with snapshots.enabled runs the snapshotter on the CSI socket, grants it the snapshot resources and renders the class", func() {
		objs := render(map[string]any{"snapshots": map[string]any{"enabled": true, "volumeSnapshotClass": map[string]any{"isDefault": true, "deletionPolicy": "Retain"}}})
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		c := container(dep.Spec.Template.Spec.Containers, "csi-snapshotter")
		Expect(c.Image).To(Equal("registry.k8s.io/sig-storage/csi-snapshotter:v8.7.0"))
		Expect(c.Args).To(ContainElements("--csi-address=/csi/csi.sock", "--leader-election"))
		Expect(c.VolumeMounts).To(ContainElement(HaveField("Name", "socket-dir")))
		role := decode[rbacv1.ClusterRole](find(objs, "ClusterRole", "pillar-pillar-csi-controller"))
		Expect(role.Rules).To(ContainElements(snapshotterRule,
			rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotclasses"}, Verbs: []string{"get", "list", "watch"}},
			rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshotcontents/status"}, Verbs: []string{"update", "patch"}},
			// The provisioner's finalizer on a VolumeSnapshot being restored.
			rbacv1.PolicyRule{APIGroups: []string{"snapshot.storage.k8s.io"}, Resources: []string{"volumesnapshots"}, Verbs: []string{"watch", "update"}}))
		vsc := find(objs, "VolumeSnapshotClass", "pillar-pillar-csi").Map
		Expect(vsc["apiVersion"]).To(Equal("snapshot.storage.k8s.io/v1"))
		Expect(vsc["driver"]).To(Equal(domain))
		Expect(vsc["deletionPolicy"]).To(Equal("Retain"))
		Expect(vsc["metadata"]).To(HaveKeyWithValue("annotations", HaveKeyWithValue("snapshot.storage.kubernetes.io/is-default-class", "true")))

		objs = render(map[string]any{"snapshots": map[string]any{"enabled": true, "volumeSnapshotClass": map[string]any{"create": false}}})
		for _, o := range objs {
			Expect(o.Kind).NotTo(Equal("VolumeSnapshotClass"))
		}
	})
})
