//go:build kinde2e

package kind_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/restmapper"

	"github.com/pillarhq/pillar/conformance/charts"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
)

// Volume snapshots with the real external-snapshotter: the cluster's half
// (the snapshot.storage.k8s.io CRDs from the client module's YAML and the
// snapshot-controller, testdata/snapshot-controller.yaml) installed before
// the chart, the chart's half (csi-snapshotter sidecar, VolumeSnapshotClass)
// by snapshots.enabled in csiValues. No rule IDs: snapshots are beyond the
// seed (storage issue part 7).

var snapshotCRDs = flag.String("snapshot-crds", "", "directory of the snapshot.storage.k8s.io CRD YAML (scripts/kind/snapshot-crds.sh)")

const snapGroup = "snapshot.storage.k8s.io"

var (
	crdsGVR            = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	volumeSnapshotsGVR = schema.GroupVersionResource{Group: snapGroup, Version: "v1", Resource: "volumesnapshots"}
	snapContentsGVR    = schema.GroupVersionResource{Group: snapGroup, Version: "v1", Resource: "volumesnapshotcontents"}
	snapClassesGVR     = schema.GroupVersionResource{Group: snapGroup, Version: "v1", Resource: "volumesnapshotclasses"}
)

// snapshotImages are the chart's csi-snapshotter reference and the
// snapshot-controller's: the same registry path and tag, as
// scripts/kind/sidecar-images.sh tags them.
func snapshotImages() (sidecar, controller string) {
	objs, err := charts.Render("pillar-csi", map[string]any{"snapshots": map[string]any{"enabled": true}})
	Expect(err).NotTo(HaveOccurred())
	var found []string
	for _, o := range objs {
		collectImages(o.Map, &found)
	}
	for _, img := range found {
		if repo, tag, ok := strings.Cut(img, ":"); ok && strings.HasSuffix(repo, "/csi-snapshotter") {
			return img, strings.TrimSuffix(repo, "csi-snapshotter") + "snapshot-controller:" + tag
		}
	}
	Fail("the chart with snapshots.enabled renders no csi-snapshotter image")
	return "", ""
}

// readManifests decodes a multi-document YAML file.
func readManifests(path string) []*unstructured.Unstructured {
	f, err := os.Open(path)
	Expect(err).NotTo(HaveOccurred())
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			return out
		}
		Expect(err).NotTo(HaveOccurred(), path)
		if m != nil {
			out = append(out, &unstructured.Unstructured{Object: m})
		}
	}
}

// apply server-side applies objects, as `kubectl apply --server-side`.
func apply(c context.Context, objs ...*unstructured.Unstructured) {
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(kc.Client.Discovery()))
	for _, o := range objs {
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		Expect(err).NotTo(HaveOccurred(), gvk.String())
		_, err = kc.Dynamic.Resource(m.Resource).Namespace(o.GetNamespace()).Apply(c, o.GetName(), o, metav1.ApplyOptions{FieldManager: "pillar-e2e", Force: true})
		Expect(err).NotTo(HaveOccurred(), "%s %s", gvk.Kind, o.GetName())
	}
}

// installSnapshotSupport installs the snapshot CRDs shipped in
// external-snapshotter's client module (waiting until they serve) and the
// snapshot-controller built from its main module.
func installSnapshotSupport(c context.Context) {
	Expect(*snapshotCRDs).NotTo(BeEmpty(), "-snapshot-crds is required (scripts/e2e-kind.sh passes it)")
	var names []string
	for _, kind := range []string{"volumesnapshotclasses", "volumesnapshotcontents", "volumesnapshots"} {
		objs := readManifests(filepath.Join(*snapshotCRDs, snapGroup+"_"+kind+".yaml"))
		Expect(objs).To(HaveLen(1))
		apply(c, objs...)
		names = append(names, objs[0].GetName())
	}
	for _, n := range names {
		Eventually(func(g Gomega) string {
			o, err := kc.Dynamic.Resource(crdsGVR).Get(c, n, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
			for _, x := range conds {
				if m, _ := x.(map[string]any); m["type"] == "Established" {
					return fmt.Sprint(m["status"])
				}
			}
			return ""
		}, time.Minute, time.Second).Should(Equal("True"), n)
	}
	_, image := snapshotImages()
	objs := readManifests("testdata/snapshot-controller.yaml")
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		cs, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		Expect(cs).To(HaveLen(1))
		cs[0].(map[string]any)["image"] = image
		Expect(unstructured.SetNestedSlice(o.Object, cs, "spec", "template", "spec", "containers")).To(Succeed())
	}
	apply(c, objs...)
}

// waitSnapshotController waits until the snapshot-controller holds its
// leader Lease: it takes it only after its start-up checks of the CRDs
// (a Deployment counts a container that then exits as available).
func waitSnapshotController(c context.Context) {
	Eventually(func(g Gomega) {
		l, err := kc.Client.CoordinationV1().Leases("kube-system").Get(c, "snapshot-controller-leader", metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
		g.Expect(*l.Spec.HolderIdentity).To(HavePrefix("snapshot-controller-"))
	}, 3*time.Minute, 2*time.Second).Should(Succeed(), func() string {
		pods, err := kc.Client.CoreV1().Pods("kube-system").List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=snapshot-controller"})
		if err != nil || len(pods.Items) == 0 {
			return fmt.Sprintf("snapshot-controller has no pod (%v)", err)
		}
		return "snapshot-controller not running; its log: " + podLog(c, "kube-system", pods.Items[0].Name, "")
	})
}

// snapshotClass is the VolumeSnapshotClass the chart rendered for the driver.
func snapshotClass(c context.Context) string {
	l, err := kc.Dynamic.Resource(snapClassesGVR).List(c, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, o := range l.Items {
		if d, _, _ := unstructured.NestedString(o.Object, "driver"); d == driver {
			return o.GetName()
		}
	}
	Fail("the chart made no VolumeSnapshotClass for " + driver)
	return ""
}

func volumeSnapshot(name, claim, class string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": snapGroup + "/v1", "kind": "VolumeSnapshot",
		"metadata": map[string]any{"name": name, "namespace": appNS},
		"spec": map[string]any{
			"volumeSnapshotClassName": class,
			"source":                  map[string]any{"persistentVolumeClaimName": claim},
		},
	}}
}

// snapshotStatus reads a VolumeSnapshot's readiness, bound content and
// error message.
func snapshotStatus(c context.Context, name string) (ready bool, content, errMsg string) {
	o, err := kc.Dynamic.Resource(volumeSnapshotsGVR).Namespace(appNS).Get(c, name, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	ready, _, _ = unstructured.NestedBool(o.Object, "status", "readyToUse")
	content, _, _ = unstructured.NestedString(o.Object, "status", "boundVolumeSnapshotContentName")
	errMsg, _, _ = unstructured.NestedString(o.Object, "status", "error", "message")
	return ready, content, errMsg
}

// agentSnapshots lists the names of the snapshots the agent has in a pool,
// straight from its storage.
func agentSnapshots(c context.Context, pool string) []string {
	l, err := agentClient(insecure.NewCredentials()).ListSnapshots(c, &agentv1.ListSnapshotsRequest{Pool: pool})
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, s := range l.GetSnapshots() {
		out = append(out, s.GetName())
	}
	return out
}

func ensureStorageClass(c context.Context, name, store string, params map[string]string) {
	_, err := kc.Client.StorageV1().StorageClasses().Create(c, storageClass(name, store, params, false), metav1.CreateOptions{})
	if !apierrors.IsAlreadyExists(err) {
		Expect(err).NotTo(HaveOccurred())
	}
}

// waitGone waits until a get answers NotFound.
func waitGone(what string, get func() error) {
	Eventually(func() bool { return apierrors.IsNotFound(get()) }, 3*time.Minute, time.Second).Should(BeTrue(), what)
}

// restoreFromSnapshot: a claim on class is written, snapshotted, written
// again; a claim restored from the snapshot holds the first data, and the
// snapshot is on the agent's storage until its VolumeSnapshot is deleted,
// which succeeds while the restored claim lives, as the external storage
// suite does it. On ZFS the restored volume is a clone of the snapshot:
// ZFS keeps it (deferred destroy, hidden from the agent's lists) until
// that claim goes, and only then can the source's volume be destroyed, so
// the source's PV going last proves the snapshot went with the clone.
func restoreFromSnapshot(prefix, class string) {
	// Three pods and two deletions retried by the sidecar: more than ctx's
	// five minutes on a busy machine.
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	DeferCleanup(cancel)
	src, snap, restored := prefix+"-src", prefix+"-snap", prefix+"-restored"
	_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc(src, class, "128Mi", false), metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	srcPV := waitBound(c, src).Spec.VolumeName
	Expect(runPod(c, pod(prefix+"-writer", src, false, "echo taken-"+prefix+" > /data/f && sync && cat /data/f"))).To(ContainSubstring("taken-" + prefix))

	_, err = kc.Dynamic.Resource(volumeSnapshotsGVR).Namespace(appNS).Create(c, volumeSnapshot(snap, src, snapshotClass(c)), metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	var content string
	Eventually(func(g Gomega) {
		ready, cn, msg := snapshotStatus(c, snap)
		g.Expect(msg).To(BeEmpty())
		g.Expect(ready).To(BeTrue(), "events: %s", events(c, appNS, snap))
		content = cn
	}, 2*time.Minute, time.Second).Should(Succeed())
	o, err := kc.Dynamic.Resource(snapContentsGVR).Get(c, content, metav1.GetOptions{})
	Expect(err).NotTo(HaveOccurred())
	handle, _, _ := unstructured.NestedString(o.Object, "status", "snapshotHandle")
	id, err := csiids.ParseSnapshot(handle)
	Expect(err).NotTo(HaveOccurred(), handle)
	Expect(agentSnapshots(c, id.Pool)).To(ContainElement(id.Name))

	// The source changes after the snapshot; the restore must not see it.
	Expect(runPod(c, pod(prefix+"-rewriter", src, false, "echo later > /data/f && sync && cat /data/f"))).To(ContainSubstring("later"))
	r := pvc(restored, class, "128Mi", false)
	r.Spec.DataSource = &corev1.TypedLocalObjectReference{APIGroup: ptr(snapGroup), Kind: "VolumeSnapshot", Name: snap}
	_, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, r, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	restoredPV := waitBound(c, restored).Spec.VolumeName
	log := runPod(c, pod(prefix+"-reader", restored, false, "cat /data/f"))
	Expect(log).To(ContainSubstring("taken-" + prefix))
	Expect(log).NotTo(ContainSubstring("later"))

	deleteSnapshot := func() {
		Expect(kc.Dynamic.Resource(volumeSnapshotsGVR).Namespace(appNS).Delete(c, snap, metav1.DeleteOptions{})).To(Succeed())
	}
	deleteClaim := func(name, pv string) {
		Expect(kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, name, metav1.DeleteOptions{})).To(Succeed())
		waitGone("PV of "+name, func() error {
			_, err := kc.Client.CoreV1().PersistentVolumes().Get(c, pv, metav1.GetOptions{})
			return err
		})
	}
	deleteSnapshot()
	waitGone("VolumeSnapshotContent "+content, func() error {
		_, err := kc.Dynamic.Resource(snapContentsGVR).Get(c, content, metav1.GetOptions{})
		return err
	})
	Expect(agentSnapshots(c, id.Pool)).NotTo(ContainElement(id.Name))
	Expect(runPod(c, pod(prefix+"-reader-after", restored, false, "cat /data/f"))).To(ContainSubstring("taken-" + prefix))
	deleteClaim(restored, restoredPV)
	deleteClaim(src, srcPV)
}

// snapshotSpecs run inside the ordered pillar-csi container, after the
// agent and its stores are Ready.
func snapshotSpecs() {
	It("restores an LVM thin claim from a VolumeSnapshot and deletes the thin snapshot with it", Label("snapshots", "lvm-thin"), func() {
		restoreFromSnapshot("snap-thin", "pillar-thin")
	})

	It("restores a ZFS claim from a VolumeSnapshot and deletes the VolumeSnapshot while the restored claim lives", Label("snapshots", "zfs"), func() {
		ensureStorageClass(ctx(), "pillar-zfs", "zvol", nil)
		restoreFromSnapshot("snap-zfs", "pillar-zfs")
	})

	It("refuses a VolumeSnapshot of a linear LVM claim, saying why on the VolumeSnapshot", Label("snapshots", "lvm-linear"), func() {
		c := ctx()
		ensureStorageClass(c, "pillar-linear", "thin", map[string]string{"provisioningMode": "linear"})
		_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("snap-linear", "pillar-linear", "32Mi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		pv := waitBound(c, "snap-linear").Spec.VolumeName
		got, err := kc.Client.CoreV1().PersistentVolumes().Get(c, pv, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		vol, err := csiids.ParseVolume(got.Spec.CSI.VolumeHandle)
		Expect(err).NotTo(HaveOccurred())
		before := agentSnapshots(c, vol.Pool)
		_, err = kc.Dynamic.Resource(volumeSnapshotsGVR).Namespace(appNS).Create(c, volumeSnapshot("snap-linear", "snap-linear", snapshotClass(c)), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		var msg string
		Eventually(func() string { _, _, msg = snapshotStatus(c, "snap-linear"); return msg }, 2*time.Minute, time.Second).
			Should(ContainSubstring("LVM snapshots and clones need thin volumes"))
		Expect(msg).To(ContainSubstring("InvalidArgument"))
		ready, content, _ := snapshotStatus(c, "snap-linear")
		Expect(ready).To(BeFalse())
		o, err := kc.Dynamic.Resource(snapContentsGVR).Get(c, content, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		cmsg, _, _ := unstructured.NestedString(o.Object, "status", "error", "message")
		Expect(cmsg).To(ContainSubstring("linear volume"))
		// Nothing was made on the storage, and the pieces go away.
		Expect(agentSnapshots(c, vol.Pool)).To(ConsistOf(before))
		Expect(kc.Dynamic.Resource(volumeSnapshotsGVR).Namespace(appNS).Delete(c, "snap-linear", metav1.DeleteOptions{})).To(Succeed())
		waitGone("VolumeSnapshotContent "+content, func() error {
			_, err := kc.Dynamic.Resource(snapContentsGVR).Get(c, content, metav1.GetOptions{})
			return err
		})
		Expect(kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, "snap-linear", metav1.DeleteOptions{})).To(Succeed())
		waitGone("PV of snap-linear", func() error {
			_, err := kc.Client.CoreV1().PersistentVolumes().Get(c, pv, metav1.GetOptions{})
			return err
		})
	})
}
