//go:build kinde2e

package kind_test

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/pillarhq/pillar/conformance/charts"
	h "github.com/pillarhq/pillar/conformance/harness"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
)

// simRoot is where the agent keeps its simulated pools on the kind node;
// the node plugin reads the same directory to attach exported volumes as
// loop devices (its loopback connector).
const simRoot = "/var/lib/pillar-sim"

// csiValues are the chart values of the e2e: the defaults, plus the
// agent and node on simulated storage through extraArgs and extraVolumes,
// run by their simulated variants (pillar-agent-sim, pillar-node-sim:
// the product's Main with conformance/simnode; scripts/images.sh builds
// them on the same base as the production images).
func csiValues(extra map[string]any) map[string]any {
	simVol := []any{map[string]any{"name": "sim", "hostPath": map[string]any{"path": simRoot, "type": "DirectoryOrCreate"}}}
	simMount := []any{map[string]any{"name": "sim", "mountPath": simRoot}}
	v := map[string]any{
		"agent": map[string]any{
			"backends": []any{
				// A budget of ten times the thin pool's size, so capacity
				// tracking sees thin claims (capacitySpec).
				map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "thinPool": "thin", "provisioningMode": "thin", "overprovisionRatio": 10}},
				map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "k8s"}},
			},
			"image":             map[string]any{"repository": "pillar/pillar-agent-sim", "tag": "local"},
			"extraArgs":         []any{"--sim-root=" + simRoot, "--sim-pool-size=20G"},
			"extraVolumes":      simVol,
			"extraVolumeMounts": simMount,
		},
		"node": map[string]any{
			"image":             map[string]any{"repository": "pillar/pillar-node-sim", "tag": "local"},
			"extraArgs":         []any{"--connector=loop", "--sim-root=" + simRoot, "--state-dir=" + simRoot + "/node"},
			"extraVolumes":      simVol,
			"extraVolumeMounts": simMount,
		},
		// The csi-snapshotter sidecar and the VolumeSnapshotClass
		// (snapshots_test.go installs the cluster's half first).
		"snapshots": map[string]any{"enabled": true},
		// Storage capacity tracking (on by default; capacitySpec), refreshed
		// often enough for a spec to watch it move.
		"controller": map[string]any{"sidecars": map[string]any{"provisioner": map[string]any{"capacityPollInterval": "5s"}}},
	}
	for k, x := range extra {
		if m, ok := x.(map[string]any); ok {
			if base, ok := v[k].(map[string]any); ok {
				for kk, vv := range m {
					base[kk] = vv
				}
				continue
			}
		}
		v[k] = x
	}
	return v
}

func installCSI(c context.Context, extra map[string]any) {
	Expect(kc.Helm(c, release, csiNS, charts.Dir("pillar-csi"), csiValues(extra), 4*time.Minute)).To(Succeed())
	// Helm's wait ends when the controller pods are Ready, but the API
	// server reaches the webhooks through the Service's cluster IP, which
	// kube-proxy routes a moment later (on a busy machine, seconds later).
	// A dry-run create goes through both webhooks and stores nothing; as
	// kubectl users do after an install, retry until it is admitted.
	probe := object("PillarAgent", "admission-probe", map[string]any{"nodeName": "admission-probe"})
	Eventually(func() error {
		_, err := kc.Dynamic.Resource(agentsGVR).Create(c, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err
	}, 2*time.Minute, time.Second).Should(Succeed(), "webhooks not reachable after the install")
}

// agentClient dials the agent's host port on the node from this machine.
func agentClient(creds credentials.TransportCredentials) agentv1.AgentServiceClient {
	ip, err := kc.NodeIP()
	Expect(err).NotTo(HaveOccurred())
	conn, err := grpc.NewClient(ip+":9500", grpc.WithTransportCredentials(creds))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return agentv1.NewAgentServiceClient(conn)
}

// dfKiB parses the size column of the last `df -k` line in a log.
func dfKiB(log string) int64 {
	lines := strings.Split(strings.TrimSpace(log), "\n")
	f := strings.Fields(lines[len(lines)-1])
	if len(f) < 2 {
		return 0
	}
	n, _ := strconv.ParseInt(f[1], 10, 64)
	return n
}

var _ = Describe("pillar-csi installed by its chart", Ordered, func() {
	var nodeName string

	BeforeAll(func() {
		c := ctx()
		installSnapshotSupport(c)
		installCSI(c, nil)
		waitSnapshotController(c)
		_, err := kc.Client.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: appNS}}, metav1.CreateOptions{})
		if !apierrors.IsAlreadyExists(err) {
			Expect(err).NotTo(HaveOccurred())
		}
		n, err := kc.Node()
		Expect(err).NotTo(HaveOccurred())
		nodeName = n.String()
	})

	It("labels the agent's node, runs the agent there, and makes agent and stores Ready", Label("S-AG-14", "S-AG-10", "S-AG-2"), func() {
		c := ctx()
		Expect(createCR(c, agentsGVR, object("PillarAgent", "node-a", map[string]any{"nodeName": nodeName}))).To(Succeed())
		Eventually(func(g Gomega) string {
			n, err := kc.Client.CoreV1().Nodes().Get(c, nodeName, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			return n.Labels[group+"/agent-node"]
		}, time.Minute, time.Second).Should(Equal("true"))
		// The DaemonSet's selector now matches: the agent starts, and the
		// agent resource turns Ready with the pools it discovered.
		Eventually(func() string { s, _ := condition(c, agentsGVR, "node-a", "Ready"); return s }, 3*time.Minute, 2*time.Second).Should(Equal("True"))
		Expect(createCR(c, storesGVR, object("PillarStore", "thin", map[string]any{
			"agentRef": "node-a", "backend": map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "thinPool": "thin", "provisioningMode": "thin"}}}))).To(Succeed())
		Expect(createCR(c, storesGVR, object("PillarStore", "zvol", map[string]any{
			"agentRef": "node-a", "backend": map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "k8s"}}}))).To(Succeed())
		for _, s := range []string{"thin", "zvol"} {
			Eventually(func() string { st, _ := condition(c, storesGVR, s, "Ready"); return st }, 2*time.Minute, 2*time.Second).Should(Equal("True"), s)
		}
		for _, sc := range []*storagev1.StorageClass{
			storageClass("pillar-thin", "thin", nil, true),
			storageClass("pillar-xfs", "zvol", map[string]string{"csi.storage.k8s.io/fstype": "xfs"}, true),
		} {
			_, err := kc.Client.StorageV1().StorageClasses().Create(c, sc, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
	})

	It("binds a claim; data a pod wrote is there for the next pod", Label("S-CT-1", "S-ND-1"), func() {
		c := ctx()
		_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("data", "pillar-thin", "1Gi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitBound(c, "data")
		Expect(runPod(c, pod("writer", "data", false, "echo pillar-data > /data/f && sync && cat /data/f"))).To(ContainSubstring("pillar-data"))
		log := runPod(c, pod("reader", "data", false, "cat /data/f; mount | grep ' /data '"))
		Expect(log).To(ContainSubstring("pillar-data"))
		Expect(log).To(ContainSubstring("ext4"))
		// The controller's metrics Service shows the driver's CSI calls.
		for _, m := range []string{"CreateVolume", "ControllerPublishVolume"} {
			Expect(csiOperations(c, m)).To(BeNumerically(">=", 1), m)
		}
		// Detached again: the attachment is gone once no pod uses the claim.
		pv := waitBound(c, "data").Spec.VolumeName
		Eventually(func(g Gomega) int {
			l, err := kc.Client.StorageV1().VolumeAttachments().List(c, metav1.ListOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			n := 0
			for _, va := range l.Items {
				if va.Spec.Source.PersistentVolumeName != nil && *va.Spec.Source.PersistentVolumeName == pv {
					n++
				}
			}
			return n
		}, 2*time.Minute, time.Second).Should(BeZero())
	})

	// A claim cloned from another (dataSource PersistentVolumeClaim: the
	// provisioner's CreateVolume with a volume content source, an LVM thin
	// snapshot) has its data. VolumeSnapshots: snapshotSpecs.
	It("clones a claim with the data its source holds", func() {
		c := ctx()
		clone := pvc("data-clone", "pillar-thin", "1Gi", false)
		clone.Spec.DataSource = &corev1.TypedLocalObjectReference{Kind: "PersistentVolumeClaim", Name: "data"}
		_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, clone, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		pvName := waitBound(c, "data-clone").Spec.VolumeName
		Expect(runPod(c, pod("clone-reader", "data-clone", false, "cat /data/f"))).To(ContainSubstring("pillar-data"))
		Expect(csiOperations(c, "CreateVolume")).To(BeNumerically(">=", 2))
		Expect(kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, "data-clone", metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() bool {
			_, err := kc.Client.CoreV1().PersistentVolumes().Get(c, pvName, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 2*time.Minute, time.Second).Should(BeTrue())
	})

	snapshotSpecs()

	It("grows a claim and its filesystem while a pod uses it", Label("S-CT-1"), func() {
		c := ctx()
		_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("grow", "pillar-xfs", "1Gi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitBound(c, "grow")
		p := pod("df", "grow", false, "while true; do df -k /data | tail -1; sleep 2; done")
		p.Spec.RestartPolicy = corev1.RestartPolicyAlways
		_, err = kc.Client.CoreV1().Pods(appNS).Create(c, p, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { deletePod(context.Background(), "df") })
		waitRunning(c, appNS, "df")
		var before int64
		Eventually(func() int64 { before = dfKiB(podLog(c, appNS, "df", "")); return before }, time.Minute, time.Second).Should(BeNumerically(">", 0))
		Expect(before).To(BeNumerically("<", 1<<20))
		patch := []byte(`{"spec":{"resources":{"requests":{"storage":"2Gi"}}}}`)
		_, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Patch(c, "grow", types.MergePatchType, patch, metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func(g Gomega) {
			got, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Get(c, "grow", metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			q := got.Status.Capacity[corev1.ResourceStorage]
			g.Expect(q.Cmp(resource.MustParse("2Gi"))).To(BeNumerically(">=", 0), "events: %s", events(c, appNS, "grow"))
		}, 3*time.Minute, 2*time.Second).Should(Succeed())
		// The pod sees the grown filesystem without a restart.
		Eventually(func() int64 { return dfKiB(podLog(c, appNS, "df", "")) }, 2*time.Minute, 2*time.Second).Should(BeNumerically(">", 3*before/2))
	})

	It("serves a raw block claim", Label("S-CT-1", "S-ND-1"), func() {
		c := ctx()
		_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("raw", "pillar-thin", "64Mi", true), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitBound(c, "raw")
		script := "printf pillar-block > /tmp/in && dd if=/tmp/in of=/dev/xvda bs=512 count=1 conv=sync && sync && dd if=/dev/xvda bs=12 count=1 && echo && blockdev --getsize64 /dev/xvda"
		log := runPod(c, pod("block", "raw", true, script))
		Expect(log).To(ContainSubstring("pillar-block"))
		Expect(hasLine(log, "67108864")).To(BeTrue(), log)
	})

	// make bench: how long a claim takes to bind and its pod to run, one
	// at a time, through the whole chain (provisioner, controller, agent;
	// attacher, kubelet, node plugin).
	It("measures PVC-to-Bound and pod-to-Running", Label("bench"), func() {
		c := ctx()
		const n = 20
		var bound, running []time.Duration
		for i := range n {
			name := "bench-" + strconv.Itoa(i)
			t0 := time.Now()
			_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc(name, "pillar-thin", "32Mi", false), metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func(g Gomega) corev1.PersistentVolumeClaimPhase {
				got, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Get(c, name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				return got.Status.Phase
			}, 2*time.Minute, 50*time.Millisecond).Should(Equal(corev1.ClaimBound))
			bound = append(bound, time.Since(t0))
			t1 := time.Now()
			p := pod(name, name, false, "sleep 3600")
			p.Spec.RestartPolicy = corev1.RestartPolicyAlways
			_, err = kc.Client.CoreV1().Pods(appNS).Create(c, p, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
			Eventually(func(g Gomega) corev1.PodPhase {
				got, err := kc.Client.CoreV1().Pods(appNS).Get(c, name, metav1.GetOptions{})
				g.Expect(err).NotTo(HaveOccurred())
				return got.Status.Phase
			}, 3*time.Minute, 50*time.Millisecond).Should(Equal(corev1.PodRunning))
			running = append(running, time.Since(t1))
		}
		// The driver's own share: its CSI calls as the controller and the
		// node plugin logged them (the rest of pod-to-Running is the
		// kubelet; see docs/benchmarks.md).
		calls := csiCallDurations(c, "controller", "manager")
		for m, d := range csiCallDurations(c, "node", "node") {
			calls[m] = d
		}
		for i := range n {
			name := "bench-" + strconv.Itoa(i)
			deletePod(c, name)
			Expect(kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, name, metav1.DeleteOptions{})).To(Succeed())
		}
		writeBench(n, bound, running, calls)
	})

	It("removes the backing volume when the claim is deleted", Label("S-CT-1"), func() {
		c := ctx()
		_, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("gone", "pillar-thin", "32Mi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		pvName := waitBound(c, "gone").Spec.VolumeName
		pv, err := kc.Client.CoreV1().PersistentVolumes().Get(c, pvName, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		handle := pv.Spec.CSI.VolumeHandle
		parts := strings.Split(handle, "/")
		Expect(parts).To(HaveLen(3), handle)
		agent := agentClient(insecure.NewCredentials())
		names := func() []string {
			l, err := agent.ListVolumes(c, &agentv1.ListVolumesRequest{})
			Expect(err).NotTo(HaveOccurred())
			var out []string
			for _, v := range l.GetVolumes() {
				out = append(out, v.GetPool()+"/"+v.GetName())
			}
			return out
		}
		Expect(names()).To(ContainElement(parts[1] + "/" + parts[2]))
		Expect(kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, "gone", metav1.DeleteOptions{})).To(Succeed())
		Eventually(func() bool {
			_, err := kc.Client.CoreV1().PersistentVolumes().Get(c, pvName, metav1.GetOptions{})
			return apierrors.IsNotFound(err)
		}, 2*time.Minute, time.Second).Should(BeTrue())
		Expect(names()).NotTo(ContainElement(parts[1] + "/" + parts[2]))
	})

	It("refuses bad resources through the API, naming the field, and defaults the LVM mode", Label("S-GL-5"), func() {
		c := ctx()
		err := createCR(c, storesGVR, object("PillarStore", "bad-props", map[string]any{
			"agentRef": "node-a", "backend": map[string]any{"zfs": map[string]any{"pool": "tank", "properties": map[string]any{"volsize": "1G"}}}}))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.backend.zfs.properties[volsize]"))
		err = createCR(c, storesGVR, object("PillarStore", "bad-thin", map[string]any{
			"agentRef": "node-a", "backend": map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "provisioningMode": "thin"}}}))
		Expect(err).To(HaveOccurred())
		Expect(err.Error()).To(ContainSubstring("spec.backend.lvm.thinPool"))
		for _, n := range []string{"bad-props", "bad-thin"} {
			_, err := kc.Dynamic.Resource(storesGVR).Get(c, n, metav1.GetOptions{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "refused %s was stored", n)
		}
		Expect(createCR(c, storesGVR, object("PillarStore", "plain", map[string]any{
			"agentRef": "node-a", "backend": map[string]any{"lvm": map[string]any{"volumeGroup": "vg0"}}}))).To(Succeed())
		DeferCleanup(func() {
			_ = kc.Dynamic.Resource(storesGVR).Delete(context.Background(), "plain", metav1.DeleteOptions{})
		})
		o, err := kc.Dynamic.Resource(storesGVR).Get(c, "plain", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		mode, _, _ := unstructured.NestedString(o.Object, "spec", "backend", "lvm", "provisioningMode")
		Expect(mode).To(Equal("linear"))
	})

	It("keeps a store whose layout differs from the agent's not Ready, and places nothing on it", Label("S-AG-9"), func() {
		c := ctx()
		Expect(createCR(c, storesGVR, object("PillarStore", "mismatch", map[string]any{
			"agentRef": "node-a", "backend": map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "thinPool": "other", "provisioningMode": "thin"}}}))).To(Succeed())
		Eventually(func() []string {
			s, r := condition(c, storesGVR, "mismatch", "PoolDiscovered")
			return []string{s, r}
		}, 2*time.Minute, 2*time.Second).Should(Equal([]string{"False", "BackendLayoutMismatch"}))
		s, _ := condition(c, storesGVR, "mismatch", "Ready")
		Expect(s).To(Equal("False"))
		_, err := kc.Client.StorageV1().StorageClasses().Create(c, storageClass("pillar-mismatch", "mismatch", nil, false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("misplaced", "pillar-mismatch", "32Mi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() string { return events(c, appNS, "misplaced") }, 2*time.Minute, 2*time.Second).Should(ContainSubstring("BackendLayoutMismatch"))
		got, err := kc.Client.CoreV1().PersistentVolumeClaims(appNS).Get(c, "misplaced", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(got.Status.Phase).To(Equal(corev1.ClaimPending))
		Expect(kc.Client.CoreV1().PersistentVolumeClaims(appNS).Delete(c, "misplaced", metav1.DeleteOptions{})).To(Succeed())
	})

	It("talks to the agent over mTLS with operator-provided secrets", Label("S-TLS-1", "S-TLS-3"), func() {
		c := ctx()
		dir := GinkgoT().TempDir()
		ca := h.NewCA("pillar-e2e-ca")
		const serverName = "pillar-agent.pillar-system.svc"
		secret := func(name, d string) {
			data := map[string][]byte{}
			for _, f := range []string{"tls.crt", "tls.key", "ca.crt"} {
				b, err := os.ReadFile(filepath.Join(d, f))
				Expect(err).NotTo(HaveOccurred())
				data[f] = b
			}
			_, err := kc.Client.CoreV1().Secrets(csiNS).Create(c, &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: name}, Type: corev1.SecretTypeTLS, Data: data}, metav1.CreateOptions{})
			Expect(err).NotTo(HaveOccurred())
		}
		secret("driver-agent-mtls", ca.Issue(filepath.Join(dir, "agent"), "agent", []string{serverName}))
		controllerDir := ca.Issue(filepath.Join(dir, "controller"), "controller", nil)
		secret("driver-controller-mtls", controllerDir)
		installCSI(c, map[string]any{"mtls": map[string]any{"enabled": true, "serverName": serverName}})

		// Plaintext and certificate-less clients are refused now…
		Eventually(func() error {
			_, err := agentClient(insecure.NewCredentials()).GetHealth(c, &agentv1.GetHealthRequest{})
			return err
		}, 2*time.Minute, 2*time.Second).Should(HaveOccurred())
		_, err := agentClient(credentials.NewTLS(withServerName(ca.PlainTLS(), serverName))).GetHealth(c, &agentv1.GetHealthRequest{})
		Expect(err).To(HaveOccurred())
		// …while the controller, holding its secret, still provisions.
		Eventually(func() string { s, _ := condition(c, agentsGVR, "node-a", "Ready"); return s }, 2*time.Minute, 2*time.Second).Should(Equal("True"))
		_, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("secure", "pillar-thin", "32Mi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitBound(c, "secure")
		Expect(runPod(c, pod("secure-writer", "secure", false, "echo over-mtls > /data/f && cat /data/f"))).To(ContainSubstring("over-mtls"))
	})

	It("keeps provisioning with two controller replicas when the leader's pod dies", Label("S-CT-3"), func() {
		c := ctx()
		installCSI(c, map[string]any{
			"mtls":       map[string]any{"enabled": true, "serverName": "pillar-agent.pillar-system.svc"},
			"controller": map[string]any{"replicaCount": 2},
		})
		lease := "controller." + group
		var leader string
		Eventually(func(g Gomega) {
			l, err := kc.Client.CoordinationV1().Leases(csiNS).Get(c, lease, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
			leader = *l.Spec.HolderIdentity
		}, time.Minute, time.Second).Should(Succeed())
		pods, err := kc.Client.CoreV1().Pods(csiNS).List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=controller"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(2))
		var victim string
		for _, p := range pods.Items {
			if strings.HasPrefix(leader, p.Name) {
				victim = p.Name
			}
		}
		Expect(victim).NotTo(BeEmpty(), "leader %q is none of the pods", leader)
		Expect(kc.Client.CoreV1().Pods(csiNS).Delete(c, victim, metav1.DeleteOptions{GracePeriodSeconds: ptr(int64(0))})).To(Succeed())
		_, err = kc.Client.CoreV1().PersistentVolumeClaims(appNS).Create(c, pvc("after-failover", "pillar-thin", "32Mi", false), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitBound(c, "after-failover")
		Eventually(func(g Gomega) {
			l, err := kc.Client.CoordinationV1().Leases(csiNS).Get(c, lease, metav1.GetOptions{})
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(l.Spec.HolderIdentity).NotTo(BeNil())
			g.Expect(*l.Spec.HolderIdentity).NotTo(HavePrefix(victim))
		}, 2*time.Minute, time.Second).Should(Succeed())
		// Stores stay Ready under the new leader.
		Eventually(func() string { s, _ := condition(c, storesGVR, "thin", "Ready"); return s }, time.Minute, 2*time.Second).Should(Equal("True"))
	})

	capacitySpec()
	storageE2ESpec()
})

func withServerName(cfg *tls.Config, name string) *tls.Config {
	cfg.ServerName = name
	return cfg
}

var benchOut = flag.String("bench-out", "", "file the bench spec writes its markdown table to")

// csiOperations reads the count of successful CSI calls of a method from
// the controller's metrics Service (through the API server's proxy, as a
// user without a port-forward would).
func csiOperations(c context.Context, method string) float64 {
	b, err := kc.Client.CoreV1().Services(csiNS).ProxyGet("http", release+"-pillar-csi-controller-metrics", "metrics", "/metrics", nil).DoRaw(c)
	Expect(err).NotTo(HaveOccurred())
	re := regexp.MustCompile(`(?m)^pillar_csi_operations_seconds_count\{grpc_status_code="OK",method="` + method + `"\} (\S+)$`)
	m := re.FindSubmatch(b)
	if m == nil {
		return 0
	}
	n, err := strconv.ParseFloat(string(m[1]), 64)
	Expect(err).NotTo(HaveOccurred())
	return n
}

// csiCallDurations collects the durations of the csi_call log lines of the
// chart's pods of a component, by CSI method.
func csiCallDurations(c context.Context, component, container string) map[string][]time.Duration {
	pods, err := kc.Client.CoreV1().Pods(csiNS).List(c, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=" + component})
	Expect(err).NotTo(HaveOccurred())
	out := map[string][]time.Duration{}
	for _, p := range pods.Items {
		for _, line := range strings.Split(podLog(c, csiNS, p.Name, container), "\n") {
			var l struct {
				Msg        string  `json:"msg"`
				Method     string  `json:"method"`
				Code       string  `json:"code"`
				DurationMS float64 `json:"duration_ms"`
			}
			if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "csi_call" || l.Code != "OK" {
				continue
			}
			out[l.Method] = append(out[l.Method], time.Duration(l.DurationMS*float64(time.Millisecond)))
		}
	}
	return out
}

func writeBench(n int, bound, running []time.Duration, calls map[string][]time.Duration) {
	q := func(d []time.Duration, p float64) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[int(p*float64(len(s)-1)+0.5)]
	}
	var b strings.Builder
	fmt.Fprintf(&b, "| step (%d claims, one at a time) | p50 | p90 | max |\n|---|---|---|---|\n", n)
	for _, r := range []struct {
		name string
		d    []time.Duration
	}{{"PVC created → Bound", bound}, {"pod created → Running (attach, stage, publish)", running}} {
		fmt.Fprintf(&b, "| %s | %s | %s | %s |\n", r.name, q(r.d, 0.5).Round(time.Millisecond), q(r.d, 0.9).Round(time.Millisecond), q(r.d, 1).Round(time.Millisecond))
	}
	for _, m := range []struct{ method, what string }{
		{"CreateVolume", "controller → agent: create the volume"},
		{"ControllerPublishVolume", "controller → agent: export to the node"},
		{"NodeStageVolume", "node: connect, mkfs, mount"},
		{"NodePublishVolume", "node: bind mount into the pod"},
	} {
		d := calls[m.method]
		Expect(d).NotTo(BeEmpty(), "no %s in the driver's logs", m.method)
		fmt.Fprintf(&b, "| of which `%s` (%s, %d calls) | %s | %s | %s |\n", m.method, m.what, len(d),
			q(d, 0.5).Round(time.Millisecond), q(d, 0.9).Round(time.Millisecond), q(d, 1).Round(time.Millisecond))
	}
	GinkgoWriter.Print(b.String())
	fmt.Fprint(os.Stderr, b.String())
	if *benchOut != "" {
		Expect(os.WriteFile(*benchOut, []byte(b.String()), 0o644)).To(Succeed())
	}
}
