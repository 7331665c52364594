package hellopopulator

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stypes "k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
)

func hello(ns, name, file, contents string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "hello.example.com/v1alpha1", "kind": "Hello",
		"metadata": map[string]any{"name": name, "namespace": ns},
		"spec":     map[string]any{"fileName": file, "fileContents": contents},
	}}
}

func target(name, uid string, ref *corev1.TypedObjectReference) *corev1.PersistentVolumeClaim {
	class := "pillar"
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "app", UID: k8stypes.UID("uid-" + uid), ResourceVersion: "7"},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
			StorageClassName: &class,
			DataSourceRef:    ref,
		},
	}
}

func helloRef(name string) *corev1.TypedObjectReference {
	g := HelloGVR.Group
	return &corev1.TypedObjectReference{APIGroup: &g, Kind: "Hello", Name: name}
}

func fixture(t *testing.T, objs ...runtime.Object) (*Populator, *fake.Clientset) {
	t.Helper()
	immediate := storagev1.VolumeBindingImmediate
	cs := fake.NewSimpleClientset(append(objs, &storagev1.StorageClass{
		ObjectMeta: metav1.ObjectMeta{Name: "pillar"}, Provisioner: "pillar.csi", VolumeBindingMode: &immediate})...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{HelloGVR: "HelloList"}, hello("app", "example-hello", "example.txt", "Hello from app"))
	return &Populator{Client: cs, Dynamic: dyn, Namespace: "pop", Image: "hello:test",
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, cs
}

func primeClaims(t *testing.T, p *Populator) []string {
	t.Helper()
	l, err := p.Client.CoreV1().PersistentVolumeClaims("pop").List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, c := range l.Items {
		out = append(out, c.Name)
	}
	return out
}

// The whole protocol, one pass at a time, with the test standing in for
// the provisioner, the kubelet and the PersistentVolume controller.
func TestPopulatorFillsAClaimThroughAPrimeClaimAndHandsTheVolumeOver(t *testing.T) {
	ctx := context.Background()
	p, cs := fixture(t, target("data", "1", helloRef("example-hello")))

	p.Sync(ctx)
	prime, err := cs.CoreV1().PersistentVolumeClaims("pop").Get(ctx, "prime-uid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no prime claim after the first pass: %v", err)
	}
	if *prime.Spec.StorageClassName != "pillar" || prime.Spec.Resources.Requests.Storage().String() != "1Gi" ||
		!slices.Equal(prime.Spec.AccessModes, []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce}) {
		t.Fatalf("prime claim does not copy the claim's class, size and access modes: %+v", prime.Spec)
	}
	pod, err := cs.CoreV1().Pods("pop").Get(ctx, "populate-uid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("no populator pod: %v", err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != "hello:test" || pod.Spec.Volumes[0].PersistentVolumeClaim.ClaimName != "prime-uid-1" ||
		c.VolumeMounts[0].MountPath != MountPath ||
		!slices.Contains(c.Args, "--file-name=example.txt") || !slices.Contains(c.Args, "--file-contents=Hello from app") ||
		!slices.Contains(c.Args, "--mode=populate") {
		t.Fatalf("populator pod does not write the Hello's file into the prime claim: %+v", pod.Spec)
	}

	// The provisioner binds the prime claim; the pod still runs: the
	// volume stays with the prime claim.
	prime.Spec.VolumeName = "pv-1"
	if _, err := cs.CoreV1().PersistentVolumeClaims("pop").Update(ctx, prime, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-1"}, Spec: corev1.PersistentVolumeSpec{
		ClaimRef: &corev1.ObjectReference{Namespace: "pop", Name: "prime-uid-1", UID: "uid-prime"}}}
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Sync(ctx)
	if got, _ := cs.CoreV1().PersistentVolumes().Get(ctx, "pv-1", metav1.GetOptions{}); got.Spec.ClaimRef.Name != "prime-uid-1" {
		t.Fatalf("volume handed over before its pod finished: %+v", got.Spec.ClaimRef)
	}

	// The pod succeeded: the volume's claimRef names the user's claim.
	pod.Status.Phase = corev1.PodSucceeded
	if _, err := cs.CoreV1().Pods("pop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Sync(ctx)
	got, _ := cs.CoreV1().PersistentVolumes().Get(ctx, "pv-1", metav1.GetOptions{})
	if r := got.Spec.ClaimRef; r.Namespace != "app" || r.Name != "data" || r.UID != "uid-1" {
		t.Fatalf("claimRef after the pod succeeded = %+v, want app/data uid-1", r)
	}

	// The PersistentVolume controller binds the claim: pod and prime
	// claim are removed, the volume is left alone.
	claim, _ := cs.CoreV1().PersistentVolumeClaims("app").Get(ctx, "data", metav1.GetOptions{})
	claim.Spec.VolumeName = "pv-1"
	if _, err := cs.CoreV1().PersistentVolumeClaims("app").Update(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Sync(ctx)
	if _, err := cs.CoreV1().Pods("pop").Get(ctx, "populate-uid-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("populator pod left after the claim was bound: %v", err)
	}
	if n := primeClaims(t, p); len(n) != 0 {
		t.Fatalf("prime claims left after the claim was bound: %v", n)
	}
	if _, err := cs.CoreV1().PersistentVolumes().Get(ctx, "pv-1", metav1.GetOptions{}); err != nil {
		t.Fatalf("volume gone: %v", err)
	}
}

func TestPopulatorRetriesAFailedPod(t *testing.T) {
	ctx := context.Background()
	p, cs := fixture(t, target("data", "1", helloRef("example-hello")))
	p.Sync(ctx)
	pod, err := cs.CoreV1().Pods("pop").Get(ctx, "populate-uid-1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase = corev1.PodFailed
	if _, err := cs.CoreV1().Pods("pop").UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Sync(ctx)
	if _, err := cs.CoreV1().Pods("pop").Get(ctx, "populate-uid-1", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("failed pod not removed: %v", err)
	}
	p.Sync(ctx)
	again, err := cs.CoreV1().Pods("pop").Get(ctx, "populate-uid-1", metav1.GetOptions{})
	if err != nil || again.Status.Phase == corev1.PodFailed {
		t.Fatalf("no new pod after a failed one: %v %v", err, again)
	}
}

func TestPopulatorLeavesOtherClaimsAlone(t *testing.T) {
	ctx := context.Background()
	other := "other.example.com"
	p, _ := fixture(t,
		target("plain", "1", nil),
		target("snap", "2", &corev1.TypedObjectReference{APIGroup: &other, Kind: "Hello", Name: "example-hello"}),
		target("missing", "3", helloRef("no-such-hello")))
	p.Sync(ctx)
	if n := primeClaims(t, p); len(n) != 0 {
		t.Fatalf("prime claims made for claims it must not populate: %v", n)
	}
}

func TestPopulateWritesTheFile(t *testing.T) {
	dir := t.TempDir()
	if err := Populate(dir, "", "example.txt", "Hello from app"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "example.txt"))
	if err != nil || string(b) != "Hello from app" {
		t.Fatalf("file = %q, %v", b, err)
	}
	if err := Populate(dir, "", "../escape", "x"); err == nil {
		t.Fatal("a file name outside the volume was accepted")
	}
}

func TestPopulateWritesABlockDevice(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "dev")
	if err := os.WriteFile(dev, make([]byte, 64), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := Populate("", dev, "ignored", "Hello"); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(dev)
	if string(b[:5]) != "Hello" || len(b) != 64 {
		t.Fatalf("device starts %q (%d bytes)", b[:5], len(b))
	}
}
