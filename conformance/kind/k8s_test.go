//go:build kinde2e

package kind_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"time"

	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Small builders and waits over client-go for the specs.

const (
	group   = "pillar-csi.pillarhq.io"
	driver  = group
	csiNS   = "pillar-system"
	release = "pillar"
	appNS   = "e2e"
)

var (
	agentsGVR   = schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "pillaragents"}
	storesGVR   = schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "pillarstores"}
	profilesGVR = schema.GroupVersionResource{Group: group, Version: "v1alpha1", Resource: "pillarvolumeprofiles"}
)

func object(kind, name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": group + "/v1alpha1", "kind": kind,
		"metadata": map[string]any{"name": name}, "spec": spec}}
}

func createCR(c context.Context, gvr schema.GroupVersionResource, o *unstructured.Unstructured) error {
	_, err := kc.Dynamic.Resource(gvr).Create(c, o, metav1.CreateOptions{})
	return err
}

// condition returns status and reason of a condition of a cluster-scoped
// custom resource ("" when absent).
func condition(c context.Context, gvr schema.GroupVersionResource, name, typ string) (string, string) {
	o, err := kc.Dynamic.Resource(gvr).Get(c, name, metav1.GetOptions{})
	if err != nil {
		return "", err.Error()
	}
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, x := range conds {
		m, _ := x.(map[string]any)
		if m["type"] == typ {
			return fmt.Sprint(m["status"]), fmt.Sprint(m["reason"])
		}
	}
	return "", ""
}

func storageClass(name, store string, params map[string]string, expand bool) *storagev1.StorageClass {
	p := map[string]string{"store": store}
	for k, v := range params {
		p[k] = v
	}
	del := corev1.PersistentVolumeReclaimDelete
	mode := storagev1.VolumeBindingImmediate
	return &storagev1.StorageClass{
		ObjectMeta:           metav1.ObjectMeta{Name: name},
		Provisioner:          driver,
		Parameters:           p,
		ReclaimPolicy:        &del,
		VolumeBindingMode:    &mode,
		AllowVolumeExpansion: &expand,
	}
}

func pvc(name, sc, size string, block bool) *corev1.PersistentVolumeClaim {
	c := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			StorageClassName: &sc,
			Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(size)}},
		},
	}
	if block {
		m := corev1.PersistentVolumeBlock
		c.Spec.VolumeMode = &m
	}
	return c
}

// pod runs script in busybox with the claim at /data (or as /dev/xvda
// for a block claim).
func pod(name, claim string, block bool, script string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: appNS},
		Spec: corev1.PodSpec{
			RestartPolicy:                 corev1.RestartPolicyNever,
			TerminationGracePeriodSeconds: ptr(int64(1)),
			Containers: []corev1.Container{{
				Name: "c", Image: "docker.io/library/busybox:1.38.0", ImagePullPolicy: corev1.PullIfNotPresent,
				Command: []string{"sh", "-c", script},
			}},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}}},
		},
	}
	if block {
		p.Spec.Containers[0].VolumeDevices = []corev1.VolumeDevice{{Name: "v", DevicePath: "/dev/xvda"}}
	} else {
		p.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{Name: "v", MountPath: "/data"}}
	}
	return p
}

func ptr[T any](v T) *T { return &v }

func waitBound(c context.Context, name string) *corev1.PersistentVolumeClaim {
	var got *corev1.PersistentVolumeClaim
	Eventually(func(g Gomega) {
		var err error
		got, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Get(c, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Status.Phase).To(Equal(corev1.ClaimBound), "events: %s", events(c, appNS, name))
	}, 2*time.Minute, time.Second).Should(Succeed())
	return got
}

// runPod creates the pod and waits for it to end; it returns its log.
func runPod(c context.Context, p *corev1.Pod) string {
	_, err := kc.Client.CoreV1().Pods(appNS).Create(c, p, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	Eventually(func(g Gomega) {
		got, err := kc.Client.CoreV1().Pods(appNS).Get(c, p.Name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Status.Phase).To(Equal(corev1.PodSucceeded), "pod %s: %s; events: %s", p.Name, got.Status.Phase, events(c, appNS, p.Name))
	}, 3*time.Minute, time.Second).Should(Succeed())
	log := podLog(c, appNS, p.Name, "")
	deletePod(c, p.Name)
	return log
}

func waitRunning(c context.Context, ns, name string) {
	Eventually(func(g Gomega) {
		got, err := kc.Client.CoreV1().Pods(ns).Get(c, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(got.Status.Phase).To(Equal(corev1.PodRunning), "events: %s", events(c, ns, name))
	}, 3*time.Minute, time.Second).Should(Succeed())
}

func deletePod(c context.Context, name string) {
	err := kc.Client.CoreV1().Pods(appNS).Delete(c, name, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})
	if apierrors.IsNotFound(err) {
		return
	}
	Expect(err).NotTo(HaveOccurred())
	Eventually(func() bool {
		_, err := kc.Client.CoreV1().Pods(appNS).Get(c, name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}, 2*time.Minute, 500*time.Millisecond).Should(BeTrue())
}

func podLog(c context.Context, ns, name, container string) string {
	b, err := kc.Client.CoreV1().Pods(ns).GetLogs(name, &corev1.PodLogOptions{Container: container}).Do(c).Raw()
	if err != nil {
		return "log: " + err.Error()
	}
	return string(b)
}

// events of an object, for failure messages.
func events(c context.Context, ns, name string) string {
	l, err := kc.Client.CoreV1().Events(ns).List(c, metav1.ListOptions{FieldSelector: "involvedObject.name=" + name})
	if err != nil {
		return err.Error()
	}
	var b bytes.Buffer
	for _, e := range l.Items {
		fmt.Fprintf(&b, "[%s %s] ", e.Reason, strings.TrimSpace(e.Message))
	}
	return b.String()
}
