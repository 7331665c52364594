package kube_test

import (
	"context"
	"os"
	"path/filepath"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"

	"github.com/pillarhq/pillar/impl/pillar/controller"
)

func toCRD(u *unstructured.Unstructured) *apiextensionsv1.CustomResourceDefinition {
	crd := &apiextensionsv1.CustomResourceDefinition{}
	Expect(runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, crd)).To(Succeed())
	return crd
}

func resourceQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// runController runs pillar-controller's Main in this process against the
// envtest API server (as several replicas when called again), with args
// after the suite's own, until the enclosing spec or container ends or
// the returned cancel is called. It returns a client of the CSI socket
// once that answers.
func runController(cfg *rest.Config, args []string, opts ...controller.Option) (csi.ControllerClient, context.CancelFunc) {
	dir, err := os.MkdirTemp("", "kube") // short: a unix socket path has ~100 bytes
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(os.RemoveAll, dir)
	sock := filepath.Join(dir, "csi.sock")
	args = append([]string{"--driver-name", group, "--csi-endpoint", "unix://" + sock, "--metrics-bind-address", "0", "--health-probe-bind-address", "0"}, args...)
	opts = append([]controller.Option{controller.WithRestConfig(cfg), controller.InProcessReplicas()}, opts...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- controller.Main(ctx, args, os.Getenv, GinkgoWriter, opts...) }()
	DeferCleanup(func() {
		cancel()
		Eventually(done, 30*time.Second).Should(Receive(BeNil()), "pillar-controller's Main")
	})
	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	Eventually(func() error {
		_, err := csi.NewIdentityClient(conn).Probe(context.Background(), &csi.ProbeRequest{})
		return err
	}, 30*time.Second, 100*time.Millisecond).Should(Succeed(), "the CSI socket answers")
	return csi.NewControllerClient(conn), cancel
}
