//go:build kinde2e

package kind_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Storage capacity tracking (csiDriver.storageCapacity, on by default):
// the external-provisioner publishes a CSIStorageCapacity per
// WaitForFirstConsumer StorageClass and node from the driver's
// GetCapacity, and the scheduler places a pod only where its claims fit.
// The thin store is configured with overprovisionRatio, so its capacity is
// a budget of virtual sizes that thin claims use up as they are created.

// capacityOf is the capacity published for a StorageClass (nil when none
// is published yet).
func capacityOf(c context.Context, class string) *resource.Quantity {
	l, err := kc.Client.StorageV1().CSIStorageCapacities(csiNS).List(c, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	for _, x := range l.Items {
		if x.StorageClassName == class && x.Capacity != nil {
			return x.Capacity
		}
	}
	return nil
}

func capacitySpec() {
	It("publishes each StorageClass's capacity, which shrinks as claims are created, and leaves a claim that cannot fit unscheduled", func() {
		c := ctx()
		wffc := func(name, store string) *storagev1.StorageClass {
			sc := storageClass(name, store, nil, false)
			mode := storagev1.VolumeBindingWaitForFirstConsumer
			sc.VolumeBindingMode = &mode
			return sc
		}
		classes := []string{"cap-thin", "cap-zvol"}
		for i, store := range []string{"thin", "zvol"} {
			_, err := kc.Client.StorageV1().StorageClasses().Create(c, wffc(classes[i], store), metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		DeferCleanup(func() {
			for _, n := range classes {
				_ = kc.Client.StorageV1().StorageClasses().Delete(context.Background(), n, metav1.DeleteOptions{})
			}
		})

		for _, class := range classes {
			var before resource.Quantity
			Eventually(func() *resource.Quantity { return capacityOf(c, class) }, 2*time.Minute, time.Second).ShouldNot(BeNil(), class)
			before = *capacityOf(c, class)
			Expect(before.Value()).To(BeNumerically(">", 1<<30), class)
			GinkgoWriter.Printf("%s: %s published\n", class, before.String())

			// A claim binds when its pod is scheduled; its volume then
			// takes a GiB of the class's capacity (a zvol's reservation,
			// the thin budget's virtual size).
			claim := class + "-a"
			_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc(claim, class, "1Gi", false), metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(runPod(c, pod(claim, claim, false, "echo placed > /data/f && cat /data/f"))).To(ContainSubstring("placed"))
			waitBound(c, claim)
			Eventually(func() int64 { return capacityOf(c, class).Value() }, 2*time.Minute, time.Second).
				Should(BeNumerically("<=", before.Value()-1<<30), "%s: capacity after a 1 GiB claim", class)

			// A claim larger than what is left is never provisioned: the
			// scheduler keeps its pod pending for want of storage.
			huge := class + "-huge"
			_, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc(huge, class, "1Ti", false), metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			p := pod(huge, huge, false, "true")
			_, err = kc.Client.CoreV1().Pods(appNS).Create(c, p, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func() string { return events(c, appNS, huge) }, 2*time.Minute, 2*time.Second).
				Should(ContainSubstring("did not have enough free storage"), class)
			got, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Get(c, huge, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(got.Status.Phase).To(Equal(corev1.ClaimPending))
			Expect(got.Spec.VolumeName).To(BeEmpty(), "no volume was provisioned for %s", huge)
			deletePod(c, huge)
			for _, n := range []string{huge, claim} {
				err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, n, metav1.DeleteOptions{})
				if !apierrors.IsNotFound(err) {
					Expect(err).NotTo(HaveOccurred(), fmt.Sprint(n))
				}
			}
			// The capacity comes back once the volume is gone.
			Eventually(func() int64 { return capacityOf(c, class).Value() }, 2*time.Minute, time.Second).
				Should(BeNumerically(">=", before.Value()), "%s: capacity after the claim's deletion", class)
		}
	})
}
