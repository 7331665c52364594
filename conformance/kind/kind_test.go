//go:build kinde2e

package kind_test

// pillar-csi and the proxy installed by their charts on a kind cluster
// made offline from the project's node image (make e2e-kind): the agent
// runs on simulated storage through chart values, the node attaches the
// volumes as loop devices with its loopback connector, and the CSI
// sidecars are the chart's default images (built from their modules, or
// the stand-ins of sim/csisidecar). Everything goes through the Kubernetes
// API as a user's kubectl would.

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/pillarhq/pillar/conformance/charts"
	h "github.com/pillarhq/pillar/conformance/harness"
)

var (
	nodeImage = flag.String("node-image", "", "kind node image (scripts/kind/node-image.sh)")
	artifacts = flag.String("artifacts", "", "directory for the cluster's logs when a spec fails")
	keep      = flag.Bool("keep-cluster", false, "leave the cluster running at the end")
)

func TestKind(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "charts on a kind cluster")
}

const clusterName = "pillar-e2e"

var (
	kc     *h.KindCluster
	failed bool
)

// images the suite loads into the node: every image the two charts' pods
// use with default values (tagged so by scripts/images.sh and
// scripts/kind/sidecar-images.sh; a chart bump that the scripts do not
// follow fails the load, loudly), the snapshot images, the simulated
// agent and node that csiValues runs, and the test workloads' (ours and
// Kubernetes' storage e2e's).
func images() []string {
	out := []string{"pillar/sim:local", "pillar/postgres:15-local", "docker.io/library/busybox:1.38.0",
		"pillar/pillar-agent-sim:local", "pillar/pillar-node-sim:local"}
	for _, name := range []string{"pillar-csi", "proxy"} {
		objs, err := charts.Render(name, nil)
		Expect(err).NotTo(HaveOccurred(), name)
		for _, o := range objs {
			collectImages(o.Map, &out)
		}
	}
	// The chart's snapshotter sidecar (snapshots.enabled, off by default)
	// and the cluster's snapshot-controller.
	sidecar, controller := snapshotImages()
	out = append(out, sidecar, controller)
	// Kubernetes' storage e2e patterns' images (storage_e2e_test.go).
	out = append(out, storageE2EImageRefs()...)
	slices.Sort(out)
	return slices.Compact(out)
}

// collectImages appends the "image" strings of containers found anywhere
// in a manifest.
func collectImages(v any, out *[]string) {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if s, ok := e.(string); ok && k == "image" {
				*out = append(*out, s)
				continue
			}
			collectImages(e, out)
		}
	case []any:
		for _, e := range x {
			collectImages(e, out)
		}
	}
}

var _ = SynchronizedBeforeSuite(func() []byte {
	Expect(*nodeImage).NotTo(BeEmpty(), "-node-image is required (make e2e-kind builds it)")
	start := time.Now()
	var err error
	kc, err = h.CreateKind(clusterName, *nodeImage)
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("cluster up in %s\n", time.Since(start).Round(time.Second))
	start = time.Now()
	imgs := images()
	Expect(imgs).To(ContainElements(HavePrefix("ghcr.io/pillarhq/pillar-csi/node:"), HavePrefix("registry.k8s.io/sig-storage/csi-provisioner:"), HavePrefix("ghcr.io/pillarhq/pillar/proxy:")))
	Expect(kc.LoadImages(imgs...)).To(Succeed())
	GinkgoWriter.Printf("images loaded in %s\n", time.Since(start).Round(time.Second))
	return nil
}, func([]byte) {})

var _ = ReportAfterEach(func(r SpecReport) {
	if r.Failed() {
		failed = true
	}
})

var _ = SynchronizedAfterSuite(func() {}, func() {
	if kc == nil {
		return
	}
	if failed && *artifacts != "" {
		dir := filepath.Join(*artifacts, "kind-logs")
		os.RemoveAll(dir)
		// The node has no crictl (not packaged here), so kind's image list
		// fails; the journal, kubelet, containerd and pod logs are written.
		if err := kc.ExportLogs(dir); err != nil {
			fmt.Fprintf(os.Stderr, "exporting kind logs (incomplete): %v\n", err)
		}
		fmt.Fprintf(os.Stderr, "kind logs exported to %s\n", dir)
	}
	if !*keep {
		Expect(kc.Delete()).To(Succeed())
	}
})

func ctx() context.Context {
	c, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	DeferCleanup(cancel)
	return c
}

// lines of a pod's log that contain s.
func hasLine(log, s string) bool {
	for _, l := range strings.Split(log, "\n") {
		if strings.Contains(l, s) {
			return true
		}
	}
	return false
}
