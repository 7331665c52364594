package kubecontroller

import (
	"context"
	"io"
	"log/slog"
	"sort"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/crd"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
)

const testGroup = "pillar-csi.example.io"

// fakeAgent is an agent whose exports live in memory, so a test can wipe
// them as a storage node's reboot does.
type fakeAgent struct {
	agentv1.AgentServiceClient
	mu      sync.Mutex
	volumes map[string]bool            // "pool/name"
	exports map[string]map[string]bool // "pool/name" -> hosts
	calls   []string
}

func newFakeAgent(vols ...string) *fakeAgent {
	f := &fakeAgent{volumes: map[string]bool{}, exports: map[string]map[string]bool{}}
	for _, v := range vols {
		f.volumes[v] = true
	}
	return f
}

func (f *fakeAgent) reboot() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.exports = map[string]map[string]bool{}
	f.calls = nil
}

func (f *fakeAgent) hosts(vol string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for h := range f.exports[vol] {
		out = append(out, h)
	}
	sort.Strings(out)
	return out
}

func (f *fakeAgent) GetHealth(context.Context, *agentv1.GetHealthRequest, ...grpc.CallOption) (*agentv1.GetHealthResponse, error) {
	return &agentv1.GetHealthResponse{Healthy: true, TargetReady: true, Version: "test"}, nil
}

func (f *fakeAgent) ListVolumes(_ context.Context, _ *agentv1.ListVolumesRequest, _ ...grpc.CallOption) (*agentv1.ListVolumesResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	resp := &agentv1.ListVolumesResponse{}
	for id := range f.volumes {
		pool, name := split(id)
		v := &agentv1.Volume{Pool: pool, Name: name}
		if hs, ok := f.exports[id]; ok {
			v.Export = &agentv1.Export{}
			for h := range hs {
				v.Export.AllowedHosts = append(v.Export.AllowedHosts, h)
			}
		}
		resp.Volumes = append(resp.Volumes, v)
	}
	return resp, nil
}

func (f *fakeAgent) ExportVolume(_ context.Context, req *agentv1.ExportVolumeRequest, _ ...grpc.CallOption) (*agentv1.ExportVolumeResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	id := req.GetPool() + "/" + req.GetName()
	if !f.volumes[id] {
		return nil, status.Errorf(codes.NotFound, "volume %s does not exist", id)
	}
	f.calls = append(f.calls, id)
	if f.exports[id] == nil {
		f.exports[id] = map[string]bool{}
	}
	for _, h := range req.GetAllowedHosts() {
		f.exports[id][h] = true
	}
	return &agentv1.ExportVolumeResponse{Export: &agentv1.Export{}}, nil
}

func split(id string) (string, string) {
	for i := range id {
		if id[i] == '/' {
			return id[:i], id[i+1:]
		}
	}
	return id, ""
}

type oneAgent struct{ c agentv1.AgentServiceClient }

func (o oneAgent) Client(string) (agentv1.AgentServiceClient, error) { return o.c, nil }

const (
	hostA = "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-0000-4000-8000-000000000001"
	hostB = "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-0000-4000-8000-000000000002"
)

func store(name, agentRef, pool string) *unstructured.Unstructured {
	u := crd.New(testGroup, crd.KindStore)
	u.SetName(name)
	u.Object["spec"] = map[string]any{"agentRef": agentRef, "backend": map[string]any{"zfs": map[string]any{"pool": pool}}}
	return u
}

func pv(name, driver, handle string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PersistentVolumeSpec{PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: handle}}}}
}

func va(name, attacher, pvName, node string, attached bool) *storagev1.VolumeAttachment {
	return &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:   storagev1.VolumeAttachmentSpec{Attacher: attacher, NodeName: node, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pvName}},
		Status: storagev1.VolumeAttachmentStatus{Attached: attached}}
}

func csiNode(name, driver, nodeID string) *storagev1.CSINode {
	return &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{{Name: driver, NodeID: nodeID}}}}
}

// setup is a cluster with two agents: storage-1 serves store "fast"
// (pool tank), storage-2 store "other" (pool pool2). Attached from
// storage-1: pvc-a on worker-a, pvc-b on worker-a and worker-b. Not
// restored: pvc-off (attachment not attached yet), pvc-gone (being
// detached), pvc-foreign (another driver), pvc-far (another agent).
func setup(t *testing.T) (*Config, *fakeAgent) {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{crd.KindStore, crd.KindAgent} {
		scheme.AddKnownTypeWithName(crd.GVK(testGroup, k), &unstructured.Unstructured{})
		scheme.AddKnownTypeWithName(crd.GVK(testGroup, k+"List"), &unstructured.UnstructuredList{})
	}
	agentObj := crd.New(testGroup, crd.KindAgent)
	agentObj.SetName("storage-1")
	agentObj.Object["spec"] = map[string]any{"nodeName": "storage-1", "address": "10.0.0.1", "port": int64(9500)}
	gone := va("va-gone", testGroup, "pv-gone", "worker-a", true)
	now := metav1.Now()
	gone.DeletionTimestamp = &now
	gone.Finalizers = []string{"external-attacher/" + testGroup}
	objs := []client.Object{
		agentObj,
		&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "storage-1"}},
		store("fast", "storage-1", "tank"), store("other", "storage-2", "pool2"),
		csiNode("worker-a", testGroup, "worker-a/"+hostA), csiNode("worker-b", testGroup, "worker-b/"+hostB),
		pv("pv-a", testGroup, "fast/tank/pvc-a"), pv("pv-b", testGroup, "fast/tank/pvc-b"),
		pv("pv-off", testGroup, "fast/tank/pvc-off"), pv("pv-gone", testGroup, "fast/tank/pvc-gone"),
		pv("pv-foreign", "other.csi.io", "fast/tank/pvc-foreign"), pv("pv-far", testGroup, "other/pool2/pvc-far"),
		va("va-a", testGroup, "pv-a", "worker-a", true),
		va("va-b1", testGroup, "pv-b", "worker-a", true), va("va-b2", testGroup, "pv-b", "worker-b", true),
		va("va-off", testGroup, "pv-off", "worker-a", false), gone,
		va("va-foreign", "other.csi.io", "pv-foreign", "worker-a", true),
		va("va-far", testGroup, "pv-far", "worker-a", true),
	}
	cl := fake.NewClientBuilder().WithScheme(scheme).WithObjects(objs...).WithStatusSubresource(agentObj).Build()
	ag := newFakeAgent("tank/pvc-a", "tank/pvc-b", "tank/pvc-off", "tank/pvc-gone", "tank/pvc-foreign")
	cfg := &Config{Client: cl, Group: testGroup, AgentPort: 9500, Agents: oneAgent{ag}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	return cfg, ag
}

func TestAttachedOnListsLiveAttachmentsOfTheAgentsStores(t *testing.T) {
	t.Parallel()
	cfg, _ := setup(t)
	got, err := cfg.attachedOn(context.Background(), "storage-1")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"fast/tank/pvc-a": {hostA}, "fast/tank/pvc-b": {hostA, hostB}}
	if len(got) != len(want) {
		t.Fatalf("attached = %+v, want %v", got, want)
	}
	for _, a := range got {
		w, ok := want[a.Volume.String()]
		if !ok || len(w) != len(a.Hosts) {
			t.Fatalf("attached = %+v, want %v", got, want)
		}
		for i := range w {
			if w[i] != a.Hosts[i] {
				t.Fatalf("%s hosts = %v, want %v", a.Volume, a.Hosts, w)
			}
		}
	}
}

// After the agent's node reboots, its target has no exports; the agent
// reconcile restores each attached volume's export with the hosts of the
// nodes it is attached to, and nothing else.
func TestAgentReconcileRestoresExportsAfterReboot(t *testing.T) {
	t.Parallel()
	cfg, ag := setup(t)
	r := &AgentReconciler{cfg}
	req := ctrl.Request{}
	req.Name = "storage-1"
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	check := func() {
		t.Helper()
		if got := ag.hosts("tank/pvc-a"); len(got) != 1 || got[0] != hostA {
			t.Fatalf("pvc-a hosts = %v, want [%s]", got, hostA)
		}
		if got := ag.hosts("tank/pvc-b"); len(got) != 2 || got[0] != hostA || got[1] != hostB {
			t.Fatalf("pvc-b hosts = %v, want both", got)
		}
		for _, v := range []string{"tank/pvc-off", "tank/pvc-gone", "tank/pvc-foreign"} {
			if got := ag.hosts(v); len(got) != 0 {
				t.Fatalf("%s exported to %v; it is not attached", v, got)
			}
		}
	}
	check()

	ag.reboot()
	if got := ag.hosts("tank/pvc-a"); len(got) != 0 {
		t.Fatal("reboot did not wipe the exports")
	}
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	check()

	// Exports in place: nothing is exported again.
	ag.reboot()
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	ag.mu.Lock()
	ag.calls = nil
	ag.mu.Unlock()
	if _, err := r.Reconcile(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	if len(ag.calls) != 0 {
		t.Fatalf("re-exported %v although every export was in place", ag.calls)
	}
}

// An export that fails (the volume is gone) does not stop the others.
func TestRestoreExportsContinuesPastFailures(t *testing.T) {
	t.Parallel()
	ag := newFakeAgent("tank/pvc-b")
	restored, err := RestoreExports(context.Background(), ag, []Attached{
		{Volume: mustVolume("fast/tank/pvc-a"), Hosts: []string{hostA}},
		{Volume: mustVolume("fast/tank/pvc-b"), Hosts: []string{hostB}},
	})
	if err == nil || status.Code(err) != codes.NotFound {
		t.Fatalf("err = %v, want the NotFound of pvc-a", err)
	}
	if len(restored) != 1 || restored[0] != "fast/tank/pvc-b" {
		t.Fatalf("restored = %v", restored)
	}
}

func mustVolume(id string) csiids.Volume {
	v, err := csiids.ParseVolume(id)
	if err != nil {
		panic(err)
	}
	return v
}
