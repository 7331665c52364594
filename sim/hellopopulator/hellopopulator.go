// Package hellopopulator stands in for the hello populator of the
// Kubernetes CSI volume populator library, which Kubernetes' storage e2e
// spec "should provision storage with any volume data source" deploys: its
// image is not published where this project can build it, so the offline
// kind e2e runs this instead under the image reference the spec asks for
// (docs/sidecars.md).
//
// It follows the library's protocol: for a claim whose dataSourceRef names
// a Hello object, a "prime" claim with the same class, size, access modes
// and volume mode is made in the populator's namespace, a pod of the same
// image writes the Hello's file into the prime claim's volume, and the
// volume's claimRef is then moved to the user's claim, which the
// PersistentVolume controller binds; the prime claim and the pod go away.
package hellopopulator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// HelloGVR is the resource a claim's dataSourceRef names to be populated.
var HelloGVR = schema.GroupVersionResource{Group: "hello.example.com", Version: "v1alpha1", Resource: "hellos"}

const (
	helloKind = "Hello"
	// MountPath and DevicePath are where the populator pod sees the prime
	// claim's volume (filesystem and block).
	MountPath  = "/mnt"
	DevicePath = "/dev/block"
	// selectedNode is the scheduler's choice for a WaitForFirstConsumer
	// claim, which the prime claim must share.
	selectedNode = "volume.kubernetes.io/selected-node"
)

// Populator is the controller half.
type Populator struct {
	Client    kubernetes.Interface
	Dynamic   dynamic.Interface
	Namespace string // of the prime claims and populator pods
	Image     string // of the populator pods (this program, populate mode)
	Log       *slog.Logger
	Interval  time.Duration // between passes over the claims; 2 s when zero
}

// Run passes over the claims until ctx ends.
func (p *Populator) Run(ctx context.Context) {
	interval := p.Interval
	if interval == 0 {
		interval = 2 * time.Second
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		p.Sync(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Sync makes one pass: each claim to be populated from a Hello moves one
// step on.
func (p *Populator) Sync(ctx context.Context) {
	pvcs, err := p.Client.CoreV1().PersistentVolumeClaims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		p.Log.Warn("listing claims", "error", err)
		return
	}
	for i := range pvcs.Items {
		pvc := &pvcs.Items[i]
		ref := pvc.Spec.DataSourceRef
		if ref == nil || ref.Kind != helloKind || ref.APIGroup == nil || *ref.APIGroup != HelloGVR.Group {
			continue
		}
		if err := p.step(ctx, pvc); err != nil {
			p.Log.Warn("populating claim", "namespace", pvc.Namespace, "claim", pvc.Name, "error", err)
		}
	}
}

func primeName(pvc *corev1.PersistentVolumeClaim) string { return "prime-" + string(pvc.UID) }
func podName(pvc *corev1.PersistentVolumeClaim) string   { return "populate-" + string(pvc.UID) }

func (p *Populator) step(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	if pvc.Spec.VolumeName != "" || pvc.DeletionTimestamp != nil {
		return p.cleanup(ctx, pvc)
	}
	// A WaitForFirstConsumer claim is populated once the scheduler chose
	// its node, on that node.
	if wffc, err := p.waitsForConsumer(ctx, pvc); err != nil {
		return err
	} else if wffc && pvc.Annotations[selectedNode] == "" {
		return nil
	}
	hello, err := p.Dynamic.Resource(HelloGVR).Namespace(pvc.Namespace).Get(ctx, pvc.Spec.DataSourceRef.Name, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("hello %s/%s: %w", pvc.Namespace, pvc.Spec.DataSourceRef.Name, err)
	}
	fileName, _, _ := unstructured.NestedString(hello.Object, "spec", "fileName")
	contents, _, _ := unstructured.NestedString(hello.Object, "spec", "fileContents")
	if fileName == "" {
		return fmt.Errorf("hello %s/%s has no spec.fileName", pvc.Namespace, hello.GetName())
	}

	prime, err := p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Get(ctx, primeName(pvc), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		prime, err = p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Create(ctx, p.primeClaim(pvc), metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("prime claim: %w", err)
	}
	pod, err := p.Client.CoreV1().Pods(p.Namespace).Get(ctx, podName(pvc), metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		pod, err = p.Client.CoreV1().Pods(p.Namespace).Create(ctx, p.populatePod(pvc, fileName, contents), metav1.CreateOptions{})
	}
	if err != nil {
		return fmt.Errorf("populator pod: %w", err)
	}
	switch pod.Status.Phase {
	case corev1.PodFailed:
		// The next pass starts a new one.
		p.Log.Warn("populator pod failed; retrying", "pod", pod.Name, "message", pod.Status.Message)
		return ignoreNotFound(p.Client.CoreV1().Pods(p.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{}))
	case corev1.PodSucceeded:
	default:
		return nil
	}
	// The prime claim was bound for the pod to run; its volume now holds
	// the data and is handed to the user's claim.
	if prime.Spec.VolumeName == "" {
		return fmt.Errorf("prime claim %s is not bound after its pod ran", prime.Name)
	}
	pv, err := p.Client.CoreV1().PersistentVolumes().Get(ctx, prime.Spec.VolumeName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	if ref := pv.Spec.ClaimRef; ref != nil && ref.UID == pvc.UID {
		return nil
	}
	patch, err := json.Marshal(map[string]any{"spec": map[string]any{"claimRef": map[string]any{
		"apiVersion": "v1", "kind": "PersistentVolumeClaim",
		"namespace": pvc.Namespace, "name": pvc.Name, "uid": string(pvc.UID), "resourceVersion": pvc.ResourceVersion,
	}}})
	if err != nil {
		return err
	}
	if _, err := p.Client.CoreV1().PersistentVolumes().Patch(ctx, pv.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("moving volume %s to the claim: %w", pv.Name, err)
	}
	p.Log.Info("volume populated and handed over", "volume", pv.Name, "namespace", pvc.Namespace, "claim", pvc.Name)
	return nil
}

func (p *Populator) waitsForConsumer(ctx context.Context, pvc *corev1.PersistentVolumeClaim) (bool, error) {
	if pvc.Spec.StorageClassName == nil || *pvc.Spec.StorageClassName == "" {
		return false, nil
	}
	sc, err := p.Client.StorageV1().StorageClasses().Get(ctx, *pvc.Spec.StorageClassName, metav1.GetOptions{})
	if err != nil {
		return false, fmt.Errorf("storage class: %w", err)
	}
	return sc.VolumeBindingMode != nil && *sc.VolumeBindingMode == "WaitForFirstConsumer", nil
}

// cleanup removes the pod and the prime claim of a claim that is bound
// (or going away); the prime claim's volume is the claim's by then.
func (p *Populator) cleanup(ctx context.Context, pvc *corev1.PersistentVolumeClaim) error {
	return errors.Join(
		ignoreNotFound(p.Client.CoreV1().Pods(p.Namespace).Delete(ctx, podName(pvc), metav1.DeleteOptions{})),
		ignoreNotFound(p.Client.CoreV1().PersistentVolumeClaims(p.Namespace).Delete(ctx, primeName(pvc), metav1.DeleteOptions{})))
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

func (p *Populator) primeClaim(pvc *corev1.PersistentVolumeClaim) *corev1.PersistentVolumeClaim {
	prime := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: primeName(pvc), Namespace: p.Namespace},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      pvc.Spec.AccessModes,
			Resources:        pvc.Spec.Resources,
			StorageClassName: pvc.Spec.StorageClassName,
			VolumeMode:       pvc.Spec.VolumeMode,
		},
	}
	if n := pvc.Annotations[selectedNode]; n != "" {
		prime.Annotations = map[string]string{selectedNode: n}
	}
	return prime
}

func (p *Populator) populatePod(pvc *corev1.PersistentVolumeClaim, fileName, contents string) *corev1.Pod {
	c := corev1.Container{
		Name:  "populate",
		Image: p.Image,
		Args:  []string{"--mode=populate", "--file-name=" + fileName, "--file-contents=" + contents},
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		c.VolumeDevices = []corev1.VolumeDevice{{Name: "target", DevicePath: DevicePath}}
		c.Args = append(c.Args, "--device-path="+DevicePath)
	} else {
		c.VolumeMounts = []corev1.VolumeMount{{Name: "target", MountPath: MountPath}}
		c.Args = append(c.Args, "--mount-path="+MountPath)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: podName(pvc), Namespace: p.Namespace},
		Spec: corev1.PodSpec{
			RestartPolicy: corev1.RestartPolicyNever,
			Containers:    []corev1.Container{c},
			Volumes: []corev1.Volume{{Name: "target", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: primeName(pvc)}}}},
		},
	}
	if n := pvc.Annotations[selectedNode]; n != "" {
		pod.Spec.NodeName = n
	}
	return pod
}

// Populate is the pod half: the Hello's contents written to fileName in
// the mounted volume, or from the start of the block device when
// devicePath is set.
func Populate(mountPath, devicePath, fileName, contents string) error {
	if devicePath != "" {
		f, err := os.OpenFile(devicePath, os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		return writeSynced(f, contents)
	}
	if fileName != filepath.Base(fileName) {
		return fmt.Errorf("file name %q must name a file in the volume's root", fileName)
	}
	f, err := os.Create(filepath.Join(mountPath, fileName))
	if err != nil {
		return err
	}
	return writeSynced(f, contents)
}

// writeSynced writes contents to f, syncs and closes it: the volume is
// handed to another claim right after the pod ends.
func writeSynced(f *os.File, contents string) error {
	_, err := f.WriteString(contents)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
