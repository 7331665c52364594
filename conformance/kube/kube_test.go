package kube_test

// The controller's Kubernetes side against a real API server (envtest;
// scripts/kube-assets.sh builds kube-apiserver and etcd): the chart's CRDs
// and webhook configurations installed as rendered, pillar-controller's
// own Main (controller.Main: its flags, agent pool and manager) running
// in process, its CSI service reached over its socket, and a real
// pillar-agent on simulated storage behind the PillarAgent.

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/go-logr/logr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/pillarhq/pillar/conformance/charts"
	h "github.com/pillarhq/pillar/conformance/harness"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/controller"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
)

func TestKube(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "pillar-csi controller on a real API server")
}

const group = "pillar-csi.pillarhq.io"

var _ = Describe("controller", Ordered, func() {
	var (
		cl    client.Client
		agent *h.Agent
		csiCt csi.ControllerClient
		ctx   = context.Background()
	)

	obj := func(kind, name string, spec map[string]any) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": group + "/v1alpha1", "kind": kind,
			"metadata": map[string]any{"name": name}, "spec": spec}}
	}
	condition := func(kind, name, typ string) func() map[string]any {
		return func() map[string]any {
			u := &unstructured.Unstructured{}
			u.SetAPIVersion(group + "/v1alpha1")
			u.SetKind(kind)
			if err := cl.Get(ctx, client.ObjectKey{Name: name}, u); err != nil {
				return nil
			}
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			for _, c := range conds {
				if m, _ := c.(map[string]any); m["type"] == typ {
					return m
				}
			}
			return nil
		}
	}

	BeforeAll(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			Fail("KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS=$(bash scripts/kube-assets.sh)")
		}
		ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(GinkgoWriter, nil)))
		objs, err := charts.Render("pillar-csi", map[string]any{"agent": map[string]any{"backends": []any{map[string]any{"zfs": map[string]any{"pool": "tank"}}}}})
		Expect(err).NotTo(HaveOccurred())
		env := &envtest.Environment{}
		for _, o := range objs {
			switch o.Kind {
			case "CustomResourceDefinition":
				u := &unstructured.Unstructured{}
				Expect(u.UnmarshalJSON(o.JSON)).To(Succeed())
				env.CRDInstallOptions.CRDs = append(env.CRDInstallOptions.CRDs, toCRD(u))
			case "ValidatingWebhookConfiguration":
				var w admissionv1.ValidatingWebhookConfiguration
				Expect(charts.Decode(o.JSON, &w)).To(Succeed())
				env.WebhookInstallOptions.ValidatingWebhooks = append(env.WebhookInstallOptions.ValidatingWebhooks, &w)
			case "MutatingWebhookConfiguration":
				var w admissionv1.MutatingWebhookConfiguration
				Expect(charts.Decode(o.JSON, &w)).To(Succeed())
				env.WebhookInstallOptions.MutatingWebhooks = append(env.WebhookInstallOptions.MutatingWebhooks, &w)
			}
		}
		Expect(env.WebhookInstallOptions.ValidatingWebhooks).NotTo(BeEmpty(), "the chart renders the webhooks by default")
		cfg, err := env.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		scheme := runtime.NewScheme()
		Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
		cl, err = client.New(cfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())

		agent = h.StartAgent(h.AgentOptions{
			Config:   "backends:\n  - zfs: {pool: tank, parentDataset: k8s}\n  - lvm: {volumeGroup: vg0, thinPool: thin}\n",
			PoolSize: "4G",
		})
		wo := env.WebhookInstallOptions
		csiCt, _ = runController(cfg, []string{"--webhook-port", strconv.Itoa(wo.LocalServingPort), "--webhook-cert-dir", wo.LocalServingCertDir})

		Expect(cl.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "storage-1"}})).To(Succeed())
		host, port, _ := net.SplitHostPort(agent.Addr)
		p, _ := strconv.Atoi(port)
		Eventually(func() error {
			return cl.Create(ctx, obj("PillarAgent", "storage-1", map[string]any{"nodeName": "storage-1", "address": host, "port": int64(p)}))
		}, 30*time.Second, 200*time.Millisecond).Should(Succeed(), "the webhook server comes up")
	})

	It("labels the agent's node and reports the agent Ready with its pools", Label("S-AG-14"), func() {
		Eventually(func(g Gomega) string {
			var n corev1.Node
			g.Expect(cl.Get(ctx, client.ObjectKey{Name: "storage-1"}, &n)).To(Succeed())
			return n.Labels[group+"/agent-node"]
		}, 30*time.Second, 200*time.Millisecond).Should(Equal("true"))
		Eventually(condition("PillarAgent", "storage-1", "Ready"), 30*time.Second, 200*time.Millisecond).Should(HaveKeyWithValue("status", "True"))
	})

	It("makes a store with the agent's layout Ready, with capacity", func() {
		Expect(cl.Create(ctx, obj("PillarStore", "fast", map[string]any{"agentRef": "storage-1",
			"backend": map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "k8s"}}}))).To(Succeed())
		Eventually(condition("PillarStore", "fast", "Ready"), 30*time.Second, 200*time.Millisecond).Should(HaveKeyWithValue("status", "True"))
		Expect(condition("PillarStore", "fast", "PoolDiscovered")()).To(HaveKeyWithValue("reason", "Discovered"))
		Expect(condition("PillarStore", "fast", "AgentReachable")()).To(HaveKeyWithValue("status", "True"))
		r, err := csiCt.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-ok", Parameters: map[string]string{"store": "fast"},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}})
		Expect(err).NotTo(HaveOccurred())
		Expect(r.Volume.VolumeId).To(Equal("fast/tank/pvc-ok"))
	})

	// Issue 20.8: capacity for the provisioner's CSIStorageCapacity
	// objects: a StorageClass's store, asked for from a node's topology
	// segment, offers its pool's free bytes (every node reaches every store
	// over NVMe/TCP).
	It("reports a store's free bytes to GetCapacity with the StorageClass parameters and a node's topology", func() {
		top := &csi.Topology{Segments: map[string]string{csiids.TopologyKey(group): "worker-1"}}
		got, err := csiCt.GetCapacity(ctx, &csi.GetCapacityRequest{Parameters: map[string]string{"store": "fast"}, AccessibleTopology: top,
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}})
		Expect(err).NotTo(HaveOccurred())
		pool, err := agent.Client().GetCapacity(h.Ctx(), &agentv1.GetCapacityRequest{Pool: "tank"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pool.FreeBytes).To(BeNumerically(">", 0))
		Expect(got.AvailableCapacity).To(Equal(pool.FreeBytes))
	})

	It("keeps a store whose parentDataset differs from the agent's not Ready with BackendLayoutMismatch, and refuses volumes on it", Label("S-AG-9"), func() {
		Expect(cl.Create(ctx, obj("PillarStore", "drift", map[string]any{"agentRef": "storage-1",
			"backend": map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "other"}}}))).To(Succeed())
		Eventually(condition("PillarStore", "drift", "PoolDiscovered"), 30*time.Second, 200*time.Millisecond).Should(And(
			HaveKeyWithValue("status", "False"), HaveKeyWithValue("reason", "BackendLayoutMismatch")))
		Expect(condition("PillarStore", "drift", "Ready")()).To(HaveKeyWithValue("status", "False"))
		_, err := csiCt.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-drift", Parameters: map[string]string{"store": "drift"},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}})
		Expect(status.Code(err)).To(Equal(codes.FailedPrecondition), "%v", err)
		Expect(err.Error()).To(ContainSubstring("BackendLayoutMismatch"))
		// Nothing was placed anywhere.
		vols, err := agent.Client().ListVolumes(h.Ctx(), nil)
		Expect(err).NotTo(HaveOccurred())
		for _, v := range vols.Volumes {
			Expect(v.Name).NotTo(Equal("pvc-drift"))
		}
	})

	It("refuses bad stores, agents and profiles through the webhook, naming the field", func() {
		for _, c := range []struct {
			o    *unstructured.Unstructured
			want string
		}{
			{obj("PillarStore", "bad-props", map[string]any{"agentRef": "storage-1", "backend": map[string]any{"zfs": map[string]any{"pool": "tank", "properties": map[string]any{"volsize": "1G"}}}}), "spec.backend.zfs.properties[volsize]"},
			{obj("PillarStore", "bad-thin", map[string]any{"agentRef": "storage-1", "backend": map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "provisioningMode": "thin"}}}), "spec.backend.lvm.thinPool"},
			{obj("PillarStore", "bad-parent", map[string]any{"agentRef": "storage-1", "backend": map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "/abs"}}}), "spec.backend.zfs.parentDataset"},
			{obj("PillarVolumeProfile", "empty", map[string]any{}), "at least one of zfs and lvm"},
			{obj("PillarVolumeProfile", "bad-prop", map[string]any{"zfs": map[string]any{"properties": map[string]any{"mountpoint": "/x"}}}), "spec.zfs.properties[mountpoint]"},
		} {
			err := cl.Create(ctx, c.o)
			Expect(err).To(HaveOccurred(), c.o.GetName())
			Expect(err.Error()).To(ContainSubstring("denied the request"), c.o.GetName())
			Expect(err.Error()).To(ContainSubstring(c.want), c.o.GetName())
		}
	})

	It("defaults an LVM store's provisioning mode and applies profile and PVC overrides, the PVC winning", func() {
		s := obj("PillarStore", "bulk", map[string]any{"agentRef": "storage-1", "backend": map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "thinPool": "thin"}}})
		Expect(cl.Create(ctx, s)).To(Succeed())
		mode, _, _ := unstructured.NestedString(s.Object, "spec", "backend", "lvm", "provisioningMode")
		Expect(mode).To(Equal("linear"))
		Expect(cl.Create(ctx, obj("PillarVolumeProfile", "thin", map[string]any{"lvm": map[string]any{"provisioningMode": "thin"}}))).To(Succeed())
		Expect(cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "apps"}})).To(Succeed())
		Expect(cl.Create(ctx, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Name: "data", Namespace: "apps", Annotations: map[string]string{group + "/backend": "lvm: {provisioningMode: linear}"}},
			Spec: corev1.PersistentVolumeClaimSpec{AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resourceQuantity("1Gi")}}},
		})).To(Succeed())
		Eventually(condition("PillarStore", "bulk", "Ready"), 30*time.Second, 200*time.Millisecond).Should(HaveKeyWithValue("status", "True"))

		create := func(name string, params map[string]string) string {
			params["store"] = "bulk"
			r, err := csiCt.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: name, Parameters: params,
				VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
			Expect(err).NotTo(HaveOccurred())
			return r.Volume.VolumeContext["provisioningMode"]
		}
		Expect(create("pvc-store-default", map[string]string{})).To(Equal("linear"))
		Expect(create("pvc-profile", map[string]string{"profile": "thin"})).To(Equal("thin"))
		Expect(create("pvc-annotated", map[string]string{"profile": "thin",
			"csi.storage.k8s.io/pvc/name": "data", "csi.storage.k8s.io/pvc/namespace": "apps"})).To(Equal("linear"))
		_, err := csiCt.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-x", Parameters: map[string]string{"store": "bulk", "profile": "missing"},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}})
		Expect(status.Code(err)).To(Equal(codes.InvalidArgument))
	})

	// Two nodes presenting one host NQN (a cloned disk, a baked hostnqn)
	// would both pass the export's ACL: the controller refuses to publish
	// to either while both are registered, and exports nothing.
	It("refuses to publish to a node whose host NQN another node also presents", func() {
		const shared = "nqn.2014-08.org.nvmexpress:uuid:5e1f0000-0000-4000-8000-00000000c10e"
		r, err := csiCt.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-shared-nqn", Parameters: map[string]string{"store": "fast"},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
		Expect(err).NotTo(HaveOccurred())
		id := r.Volume.VolumeId
		DeferCleanup(func() { _, _ = csiCt.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}) })
		for _, n := range []string{"clone-a", "clone-b"} {
			cn := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: n},
				Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: group, NodeID: n + "/" + shared}}}}
			Expect(cl.Create(ctx, cn)).To(Succeed())
			DeferCleanup(func() { _ = cl.Delete(ctx, cn) })
		}
		publish := func() error {
			_, err := csiCt.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "clone-a/" + shared, VolumeCapability: mountCap()})
			return err
		}
		Eventually(publish, 10*time.Second, 100*time.Millisecond).Should(And(
			WithTransform(status.Code, Equal(codes.FailedPrecondition)),
			MatchError(ContainSubstring("clone-b"))), "the controller's cache sees both CSINodes")
		list, err := agent.Client().ListVolumes(ctx, &agentv1.ListVolumesRequest{Pool: "tank"})
		Expect(err).NotTo(HaveOccurred())
		for _, v := range list.Volumes {
			if v.Name == "pvc-shared-nqn" {
				Expect(v.Export).To(BeNil(), "nothing exported for the refused publish")
			}
		}
		// Once the clone is gone (its identity regenerated, re-registered
		// under another NQN), the publish goes through.
		Expect(cl.Delete(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "clone-b"}})).To(Succeed())
		Eventually(publish, 10*time.Second, 100*time.Millisecond).Should(Succeed())
		_, err = csiCt.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: "clone-a/" + shared})
		Expect(err).NotTo(HaveOccurred())
	})

	// Last in this ordered container: the rebooted agent is the spec's own
	// process, stopped when the spec ends.
	// Issue 20.2: the storage node reboots (the agent killed and started
	// on an empty target); the controller re-exports every volume with a
	// live VolumeAttachment, allowing the attached node's host NQN from
	// its CSINode, without any call from the CO.
	It("re-exports attached volumes after the storage node's target was emptied", func() {
		const hostNQN = "nqn.2014-08.org.nvmexpress:uuid:5e1f0000-0000-4000-8000-00000000a001"
		r, err := csiCt.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-reboot", Parameters: map[string]string{"store": "fast"},
			VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, CapacityRange: &csi.CapacityRange{RequiredBytes: 32 << 20}})
		Expect(err).NotTo(HaveOccurred())
		id := r.Volume.VolumeId
		pub, err := csiCt.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: "worker-1/" + hostNQN, VolumeCapability: mountCap()})
		Expect(err).NotTo(HaveOccurred())
		// What kubelet, the provisioner and the attacher leave in the API.
		Expect(cl.Create(ctx, &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "worker-1"},
			Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: group, NodeID: "worker-1/" + hostNQN}}}})).To(Succeed())
		Expect(cl.Create(ctx, &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-reboot"}, Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resourceQuantity("32Mi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimDelete,
			PersistentVolumeSource:        corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: group, VolumeHandle: id, FSType: "ext4"}},
		}})).To(Succeed())
		pvName := "pv-reboot"
		va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "csi-reboot"},
			Spec: storagev1.VolumeAttachmentSpec{Attacher: group, NodeName: "worker-1", Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}}}
		Expect(cl.Create(ctx, va)).To(Succeed())
		va.Status = storagev1.VolumeAttachmentStatus{Attached: true, AttachmentMetadata: pub.PublishContext}
		Expect(cl.Status().Update(ctx, va)).To(Succeed())

		agent.Reboot()
		Expect(h.LogEvents(agent.Proc, "msg", "exports_recovered")).To(ContainElement(HaveKeyWithValue("count", BeNumerically("==", 0))),
			"the agent started on an empty target")
		export := func() *agentv1.Export {
			list, err := agent.Client().ListVolumes(h.Ctx(), &agentv1.ListVolumesRequest{Pool: "tank"})
			if err != nil {
				return nil
			}
			for _, v := range list.Volumes {
				if v.Name == "pvc-reboot" {
					return v.Export
				}
			}
			return nil
		}
		// The agent reconciler's resync (30 s) finds the agent reachable and
		// the attached volume unexported.
		Eventually(export, 90*time.Second, time.Second).ShouldNot(BeNil())
		ex := export()
		Expect(ex.AllowedHosts).To(Equal([]string{hostNQN}))
		Expect(ex.Nqn).To(Equal(pub.PublishContext["nqn"]), "the node reconnects to the same subsystem")
		Expect(ex.Uuid).To(Equal(pub.PublishContext["uuid"]))
	})
})

func mountCap() *csi.VolumeCapability {
	return &csi.VolumeCapability{
		AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
		AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER},
	}
}

// Two replicas with leader election: the CSI service answers on both at
// once, the reconcilers run on the leader only, and when the leader stops
// the other takes over.
var _ = Describe("replicas", Ordered, func() {
	It("serve CSI on every replica and hand reconciling over when the leader stops", func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			Fail("KUBEBUILDER_ASSETS is not set: export KUBEBUILDER_ASSETS=$(bash scripts/kube-assets.sh)")
		}
		ctx := context.Background()
		objs, err := charts.Render("pillar-csi", map[string]any{"agent": map[string]any{"backends": []any{map[string]any{"zfs": map[string]any{"pool": "tank"}}}}})
		Expect(err).NotTo(HaveOccurred())
		env := &envtest.Environment{}
		for _, o := range objs {
			if o.Kind == "CustomResourceDefinition" {
				u := &unstructured.Unstructured{}
				Expect(u.UnmarshalJSON(o.JSON)).To(Succeed())
				env.CRDInstallOptions.CRDs = append(env.CRDInstallOptions.CRDs, toCRD(u))
			}
		}
		cfg, err := env.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		scheme := runtime.NewScheme()
		Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
		cl, err := client.New(cfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "storage"}})).To(Succeed())
		agent := h.StartAgent(h.AgentOptions{Config: "backends:\n  - zfs: {pool: tank}\n", PoolSize: "2G"})

		type replica struct {
			cancel  context.CancelFunc
			csi     csi.ControllerClient
			elected chan struct{}
		}
		start := func() *replica {
			r := &replica{elected: make(chan struct{})}
			r.csi, r.cancel = runController(cfg, []string{"--leader-elect", "--leader-election-namespace", "storage"},
				controller.WithElected(func() { close(r.elected) }))
			return r
		}
		a, b := start(), start()
		var leader, follower *replica
		Eventually(func() bool {
			select {
			case <-a.elected:
				leader, follower = a, b
				return true
			case <-b.elected:
				leader, follower = b, a
				return true
			default:
				return false
			}
		}, 60*time.Second, 100*time.Millisecond).Should(BeTrue())
		Consistently(follower.elected, 2*time.Second).ShouldNot(BeClosed(), "two leaders")

		host, port, _ := net.SplitHostPort(agent.Addr)
		p, _ := strconv.Atoi(port)
		Expect(cl.Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "storage-2"}})).To(Succeed())
		agentObj := &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1alpha1", "kind": "PillarAgent",
			"metadata": map[string]any{"name": "storage-2"}, "spec": map[string]any{"nodeName": "storage-2", "address": host, "port": int64(p)}}}
		Expect(cl.Create(ctx, agentObj)).To(Succeed())
		storeObj := func(name string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{"apiVersion": group + "/v1alpha1", "kind": "PillarStore",
				"metadata": map[string]any{"name": name}, "spec": map[string]any{"agentRef": "storage-2", "backend": map[string]any{"zfs": map[string]any{"pool": "tank"}}}}}
		}
		ready := func(name string) func() string {
			return func() string {
				u := &unstructured.Unstructured{}
				u.SetAPIVersion(group + "/v1alpha1")
				u.SetKind("PillarStore")
				if cl.Get(ctx, client.ObjectKey{Name: name}, u) != nil {
					return ""
				}
				conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
				for _, c := range conds {
					if m, _ := c.(map[string]any); m["type"] == "Ready" {
						s, _ := m["status"].(string)
						return s
					}
				}
				return ""
			}
		}
		Expect(cl.Create(ctx, storeObj("one"))).To(Succeed())
		Eventually(ready("one"), 30*time.Second, 200*time.Millisecond).Should(Equal("True"))
		// Both replicas serve CSI at once.
		for i, r := range []*replica{leader, follower} {
			_, err := r.csi.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: fmt.Sprintf("pvc-replica-%d", i), Parameters: map[string]string{"store": "one"},
				VolumeCapabilities: []*csi.VolumeCapability{mountCap()}, CapacityRange: &csi.CapacityRange{RequiredBytes: 16 << 20}})
			Expect(err).NotTo(HaveOccurred())
		}
		// The leader stops; the follower takes over and reconciles a new store.
		leader.cancel()
		Eventually(follower.elected, 60*time.Second).Should(BeClosed())
		Expect(cl.Create(ctx, storeObj("two"))).To(Succeed())
		Eventually(ready("two"), 30*time.Second, 200*time.Millisecond).Should(Equal("True"))
	})
})
