package charts_test

import (
	"context"
	"os"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// A real kube-apiserver (envtest; scripts/kube-assets.sh builds it) accepts
// every object the chart renders: server-side dry-run with full
// validation, after the CRDs are installed for real.
var _ = Describe("pillar-csi chart on a real API server", Ordered, func() {
	var (
		env *envtest.Environment
		cl  client.Client
	)
	BeforeAll(func() {
		if os.Getenv("KUBEBUILDER_ASSETS") == "" {
			if os.Getenv("CI") == "true" {
				Fail("KUBEBUILDER_ASSETS is not set: scripts/test.sh builds the assets with scripts/kube-assets.sh")
			}
			Skip("KUBEBUILDER_ASSETS not set (run: export KUBEBUILDER_ASSETS=$(bash scripts/kube-assets.sh))")
		}
		env = &envtest.Environment{}
		cfg, err := env.Start()
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(env.Stop)
		scheme := runtime.NewScheme()
		Expect(clientgoscheme.AddToScheme(scheme)).To(Succeed())
		cl, err = client.New(cfg, client.Options{Scheme: scheme})
		Expect(err).NotTo(HaveOccurred())
		Expect(cl.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "storage"}})).To(Succeed())
	})

	apply := func(values map[string]any) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		objs := render(values)
		// CRDs first, for real: the API server must know them.
		for _, o := range objs {
			if o.Kind != "CustomResourceDefinition" {
				continue
			}
			u := &unstructured.Unstructured{}
			Expect(u.UnmarshalJSON(o.JSON)).To(Succeed())
			err := cl.Create(ctx, u)
			if err != nil && !isAlreadyExists(err) {
				Fail(o.Name + ": " + err.Error())
			}
		}
		for _, o := range objs {
			switch o.Kind {
			case "CustomResourceDefinition":
				continue
			case "Certificate", "Issuer", "ServiceMonitor":
				continue // third-party CRDs this API server does not have
			}
			u := &unstructured.Unstructured{}
			Expect(u.UnmarshalJSON(o.JSON)).To(Succeed())
			Expect(cl.Create(ctx, u, client.DryRunAll)).To(Succeed(), "%s %s (%s)", o.Kind, o.Name, o.Source)
		}
	}

	It("accepts every rendered object of the defaults and of a full value set", Label("S-GL-2", "S-CSI-1"), func() {
		apply(nil)
		apply(map[string]any{"agent": map[string]any{"backends": backends}, "mtls": map[string]any{"enabled": true},
			"controller": map[string]any{"replicaCount": 2}, "imagePullSecrets": []any{map[string]any{"name": "regcred"}}})
	})

	It("enforces the store resource's schema: exactly one backend", Label("S-AG-6"), func() {
		ctx := context.Background()
		store := func(backend map[string]any) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": domain + "/v1alpha1", "kind": "PillarStore",
				"metadata": map[string]any{"name": "s"},
				"spec":     map[string]any{"agentRef": "node-1", "backend": backend}}}
		}
		Expect(cl.Create(ctx, store(map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "k8s"}}), client.DryRunAll)).To(Succeed())
		Expect(cl.Create(ctx, store(map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "thinPool": "t"}}), client.DryRunAll)).To(Succeed())
		err := cl.Create(ctx, store(map[string]any{"zfs": map[string]any{"pool": "a"}, "lvm": map[string]any{"volumeGroup": "b"}}), client.DryRunAll)
		Expect(err).To(MatchError(ContainSubstring("exactly one of zfs and lvm")))
		err = cl.Create(ctx, store(map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "provisioningMode": "fat"}}), client.DryRunAll)
		Expect(err).To(HaveOccurred())
	})
})

func isAlreadyExists(err error) bool { return apierrors.IsAlreadyExists(err) }
