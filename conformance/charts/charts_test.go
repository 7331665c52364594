package charts_test

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	admissionv1 "k8s.io/api/admissionregistration/v1"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	apiextv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/pillarhq/pillar/conformance/charts"
	"github.com/pillarhq/pillar/conformance/charts/chartdoc"
)

var update = flag.Bool("update", false, "rewrite the golden renders")

// bin-dir is accepted (and unused) so one `go test ./conformance/... -args
// -bin-dir=…` drives every suite.
var _ = flag.String("bin-dir", "", "unused by the chart suites")

func TestCharts(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Helm charts")
}

const domain = "pillar-csi.pillarhq.io"

var backends = []any{
	map[string]any{"zfs": map[string]any{"pool": "tank", "parentDataset": "k8s"}},
	map[string]any{"lvm": map[string]any{"volumeGroup": "vg0", "thinPool": "thin0", "provisioningMode": "thin"}},
}

func render(values map[string]any) []charts.Object {
	objs, err := charts.Render("pillar-csi", values)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	return objs
}

func find(objs []charts.Object, kind, name string) charts.Object {
	for _, o := range objs {
		if o.Kind == kind && o.Name == name {
			return o
		}
	}
	Fail(fmt.Sprintf("no %s %s rendered", kind, name), 1)
	return charts.Object{}
}

func decode[T any](o charts.Object) *T {
	var v T
	ExpectWithOffset(1, charts.Decode(o.JSON, &v)).To(Succeed(), "%s %s (%s)", o.Kind, o.Name, o.Source)
	return &v
}

func container(cs []corev1.Container, name string) corev1.Container {
	for _, c := range cs {
		if c.Name == name {
			return c
		}
	}
	Fail("no container "+name, 1)
	return corev1.Container{}
}

func resources(req, lim [2]string) corev1.ResourceRequirements {
	var r corev1.ResourceRequirements
	j := fmt.Sprintf(`{"requests":{"cpu":%q,"memory":%q},"limits":{"cpu":%q,"memory":%q}}`, req[0], req[1], lim[0], lim[1])
	Expect(json.Unmarshal([]byte(j), &r)).To(Succeed())
	return r
}

// strictKinds are decoded into their Kubernetes API types: an unknown field
// anywhere fails.
func decodeAll(objs []charts.Object) {
	for _, o := range objs {
		switch o.Kind {
		case "DaemonSet":
			decode[appsv1.DaemonSet](o)
		case "Deployment":
			decode[appsv1.Deployment](o)
		case "ConfigMap":
			decode[corev1.ConfigMap](o)
		case "Service":
			decode[corev1.Service](o)
		case "Secret":
			decode[corev1.Secret](o)
		case "ServiceAccount":
			decode[corev1.ServiceAccount](o)
		case "ClusterRole":
			decode[rbacv1.ClusterRole](o)
		case "ClusterRoleBinding":
			decode[rbacv1.ClusterRoleBinding](o)
		case "Role":
			decode[rbacv1.Role](o)
		case "RoleBinding":
			decode[rbacv1.RoleBinding](o)
		case "CSIDriver":
			decode[storagev1.CSIDriver](o)
		case "CustomResourceDefinition":
			decode[apiextv1.CustomResourceDefinition](o)
		case "ValidatingWebhookConfiguration":
			decode[admissionv1.ValidatingWebhookConfiguration](o)
		case "MutatingWebhookConfiguration":
			decode[admissionv1.MutatingWebhookConfiguration](o)
		case "PodDisruptionBudget":
			decode[policyv1.PodDisruptionBudget](o)
		case "Ingress":
			decode[networkingv1.Ingress](o)
		case "HorizontalPodAutoscaler":
			decode[autoscalingv2.HorizontalPodAutoscaler](o)
		case "Certificate", "Issuer", "ServiceMonitor", "PrometheusRule":
			// Third-party kinds: checked field by field where used.
		default:
			Fail("unexpected kind " + o.Kind + " in " + o.Source)
		}
	}
}

var secretData = regexp.MustCompile(`(?m)^(\s*(tls\.crt|tls\.key|ca\.crt|caBundle):) \S+$`)

// golden compares a render with its golden file (generated certificates
// masked).
func golden(name string, values map[string]any) { goldenOf("pillar-csi", name, values) }

// goldenOf compares a render of chart with the golden file name.
func goldenOf(chart, name string, values map[string]any) {
	objs, err := charts.Render(chart, values)
	ExpectWithOffset(1, err).NotTo(HaveOccurred())
	var b strings.Builder
	for _, o := range objs {
		y, err := yamlOf(o.JSON)
		Expect(err).NotTo(HaveOccurred())
		fmt.Fprintf(&b, "---\n# Source: %s\n%s", o.Source, y)
	}
	got := secretData.ReplaceAllString(b.String(), "$1 <generated>")
	path := filepath.Join(charts.Dir("pillar-csi"), "..", "..", "fixtures", "charts", name+".yaml")
	if *update {
		Expect(os.MkdirAll(filepath.Dir(path), 0o755)).To(Succeed())
		Expect(os.WriteFile(path, []byte(got), 0o644)).To(Succeed())
	}
	want, err := os.ReadFile(path)
	Expect(err).NotTo(HaveOccurred(), "golden file missing: go test ./conformance/charts -args -update")
	Expect(got).To(Equal(string(want)), "render of %s differs from %s (rerun with -args -update after reviewing)", name, path)
}

var _ = Describe("pillar-csi chart", func() {
	It("is version 0.3.3 and lints clean", Label("S-VER-1"), func() {
		for _, vals := range []map[string]any{{}, {"agent": map[string]any{"backends": backends}}} {
			res := lint.All(charts.Dir("pillar-csi"), vals, "storage", false)
			for _, m := range res.Messages {
				Expect(m.Severity).To(BeNumerically("<", support.WarningSev), m.Error())
			}
		}
		chart, err := os.ReadFile(filepath.Join(charts.Dir("pillar-csi"), "Chart.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(chart)).To(ContainSubstring("\nversion: 0.3.3\n"))
	})

	It("matches its golden renders", func() {
		golden("pillar-csi-defaults", nil)
		golden("pillar-csi-full", map[string]any{
			"agent":      map[string]any{"backends": backends, "extraArgs": []any{"--log-level=debug"}},
			"mtls":       map[string]any{"enabled": true, "certManager": map[string]any{"enabled": true}},
			"metrics":    map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "30s", "additionalLabels": map[string]any{"team": "storage"}}},
			"controller": map[string]any{"replicaCount": 2},
		})
	})

	It("decodes strictly into the Kubernetes API types", func() {
		decodeAll(render(nil))
		decodeAll(render(map[string]any{"agent": map[string]any{"backends": backends}, "mtls": map[string]any{"enabled": true, "certManager": map[string]any{"enabled": true}},
			"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}}))
	})

	It("renders agent.backends verbatim into <fullname>-agent-config, passed with --config", Label("S-AG-2", "S-AG-6"), func() {
		objs := render(map[string]any{"agent": map[string]any{"backends": backends}})
		cm := decode[corev1.ConfigMap](find(objs, "ConfigMap", "pillar-pillar-csi-agent-config"))
		var cfg struct {
			Backends []any `json:"backends"`
		}
		Expect(yamlUnmarshal(cm.Data["config.yaml"], &cfg)).To(Succeed())
		Expect(cfg.Backends).To(Equal(backends))
		ds := decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-agent"))
		agent := container(ds.Spec.Template.Spec.Containers, "agent")
		Expect(agent.Args).To(ContainElement("--config=/etc/pillar-csi/agent/config.yaml"))
		Expect(ds.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.ConfigMap.Name", "pillar-pillar-csi-agent-config")))
		// The store resource's spec.backend has the same placement fields.
		crd := decode[apiextv1.CustomResourceDefinition](find(objs, "CustomResourceDefinition", "pillarstores."+domain))
		backend := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["backend"]
		Expect(backend.Properties["zfs"].Properties).To(HaveKey("pool"))
		Expect(backend.Properties["zfs"].Properties).To(HaveKey("parentDataset"))
		Expect(backend.Properties["lvm"].Properties).To(HaveKey("volumeGroup"))
		Expect(backend.Properties["lvm"].Properties).To(HaveKey("thinPool"))
	})

	It("adds extra volumes and mounts to the agent and node containers", func() {
		vol := []any{map[string]any{"name": "extra", "hostPath": map[string]any{"path": "/var/lib/extra"}}}
		mnt := []any{map[string]any{"name": "extra", "mountPath": "/extra"}}
		objs := render(map[string]any{
			"agent": map[string]any{"backends": backends, "extraVolumes": vol, "extraVolumeMounts": mnt},
			"node":  map[string]any{"extraVolumes": vol, "extraVolumeMounts": mnt},
		})
		for name, ctr := range map[string]string{"pillar-pillar-csi-agent": "agent", "pillar-pillar-csi-node": "node"} {
			ds := decode[appsv1.DaemonSet](find(objs, "DaemonSet", name))
			Expect(ds.Spec.Template.Spec.Volumes).To(ContainElement(corev1.Volume{Name: "extra",
				VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/var/lib/extra"}}}), name)
			Expect(container(ds.Spec.Template.Spec.Containers, ctr).VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "extra", MountPath: "/extra"}), name)
		}
	})

	It("refuses every backend rule the seed says fails rendering, naming the key", Label("S-AG-3", "S-AG-4", "S-AG-7"), func() {
		for want, b := range map[string][]any{
			"agent.backends[0]: sets neither zfs nor lvm": {map[string]any{}},
			"agent.backends[0]: sets both zfs and lvm":    {map[string]any{"zfs": map[string]any{"pool": "a"}, "lvm": map[string]any{"volumeGroup": "b"}}},
			"agent.backends[0].zfs.properties":            {map[string]any{"zfs": map[string]any{"pool": "a", "properties": map[string]any{"compression": "lz4"}}}},
			"agent.backends[0].zfs.pool: required":        {map[string]any{"zfs": map[string]any{"parentDataset": "x"}}},
			"agent.backends[0].zfs.volumeType":            {map[string]any{"zfs": map[string]any{"pool": "a", "volumeType": "filesystem"}}},
			"agent.backends[0].lvm.volumeGroup: required": {map[string]any{"lvm": map[string]any{"thinPool": "t"}}},
			"agent.backends[0].lvm.provisioningMode":      {map[string]any{"lvm": map[string]any{"volumeGroup": "v", "provisioningMode": "fat"}}},
			"agent.backends[0].lvm.size: unknown key":     {map[string]any{"lvm": map[string]any{"volumeGroup": "v", "size": 1}}},
			// Beyond the seed: the thin pool's overprovision budget.
			"agent.backends[0].lvm.overprovisionRatio: must be a number of at least 1": {map[string]any{"lvm": map[string]any{"volumeGroup": "v", "thinPool": "t", "overprovisionRatio": 0.5}}},
			"agent.backends[0].lvm.overprovisionRatio: must be a number":               {map[string]any{"lvm": map[string]any{"volumeGroup": "v", "thinPool": "t", "overprovisionRatio": "2"}}},
			"agent.backends[0].lvm.overprovisionRatio: needs lvm.thinPool":             {map[string]any{"lvm": map[string]any{"volumeGroup": "v", "overprovisionRatio": 2}}},
			"agent.backends[0].nfs: unknown key":                                       {map[string]any{"nfs": map[string]any{}, "lvm": map[string]any{"volumeGroup": "v"}}},
			`agent.backends[1].zfs.pool: pool "a" appears in more`:                     {map[string]any{"zfs": map[string]any{"pool": "a"}}, map[string]any{"zfs": map[string]any{"pool": "a"}}},
			`agent.backends[1].lvm.volumeGroup: volume group "v" a`:                    {map[string]any{"lvm": map[string]any{"volumeGroup": "v"}}, map[string]any{"lvm": map[string]any{"volumeGroup": "v"}}},
			`"same" is both a ZFS pool and an LVM volume group`:                        {map[string]any{"zfs": map[string]any{"pool": "same"}}, map[string]any{"lvm": map[string]any{"volumeGroup": "same"}}},
		} {
			_, err := charts.Render("pillar-csi", map[string]any{"agent": map[string]any{"backends": b}})
			Expect(err).To(HaveOccurred(), want)
			Expect(err.Error()).To(ContainSubstring(want))
		}
		// A whole or fractional ratio with a thin pool renders into the
		// agent's configuration as given.
		for _, ratio := range []any{10, 2.5} {
			objs, err := charts.Render("pillar-csi", map[string]any{"agent": map[string]any{"backends": []any{
				map[string]any{"lvm": map[string]any{"volumeGroup": "v", "thinPool": "t", "overprovisionRatio": ratio}}}}})
			Expect(err).NotTo(HaveOccurred(), "ratio %v", ratio)
			cm := find(objs, "ConfigMap", "pillar-pillar-csi-agent-config")
			Expect(fmt.Sprint(cm.Map["data"])).To(ContainSubstring(fmt.Sprintf("overprovisionRatio: %v", ratio)))
		}
	})

	It("refuses values outside their allowed sets through the schema", func() {
		for _, vals := range []map[string]any{
			{"imagePullPolicy": "Sometimes"},
			{"csiDriver": map[string]any{"fsGroupPolicy": "All"}},
			{"agent": map[string]any{"grpcPort": 70000}},
			{"agent": map[string]any{"hostNetwork": "yes"}},
			{"controller": map[string]any{"replicaCount": -1}},
			{"agent": map[string]any{"image": map[string]any{"pullPolicy": "Sometimes"}}},
			{"unknownTopLevel": true},
			{"webhook": map[string]any{"port": "9443"}},
		} {
			_, err := charts.Render("pillar-csi", vals)
			Expect(err).To(HaveOccurred(), "%v", vals)
			Expect(err.Error()).To(ContainSubstring("schema"))
		}
		_, err := charts.Render("pillar-csi", map[string]any{"agent": map[string]any{"hostPort": 9600}})
		Expect(err).To(MatchError(ContainSubstring("agent.hostPort (9600) must equal agent.grpcPort (9500)")))
	})

	// The exports themselves (S-AG-10, S-AG-11, S-AG-12) are behaviour:
	// conformance/agent, conformance/kernel and conformance/kind assert them.
	It("renders the agent privileged on the host network of labelled nodes, gRPC 9500 as hostPort, nvmet before nvmet_tcp best effort", Label("S-AG-13", "S-AG-14"), func() {
		ds := decode[appsv1.DaemonSet](find(render(nil), "DaemonSet", "pillar-pillar-csi-agent"))
		spec := ds.Spec.Template.Spec
		Expect(spec.HostNetwork).To(BeTrue())
		Expect(spec.NodeSelector).To(Equal(map[string]string{domain + "/agent-node": "true"}))
		agent := container(spec.Containers, "agent")
		Expect(*agent.SecurityContext.Privileged).To(BeTrue())
		Expect(agent.Ports).To(ConsistOf(And(HaveField("ContainerPort", int32(9500)), HaveField("HostPort", int32(9500)))))
		Expect(agent.Args).To(ContainElement("--listen=:9500"))
		init := container(spec.InitContainers, "modprobe")
		Expect(init.Command[len(init.Command)-2:]).To(Equal([]string{"nvmet", "nvmet_tcp"}))
		Expect(init.Command[2]).To(ContainSubstring(`|| echo`), "failures are ignored")
		Expect(init.Image).To(Equal("docker.io/library/busybox:1.38.0"))

		ds = decode[appsv1.DaemonSet](find(render(map[string]any{"agent": map[string]any{"hostPort": 0, "hostNetwork": false, "privileged": false}}), "DaemonSet", "pillar-pillar-csi-agent"))
		Expect(ds.Spec.Template.Spec.HostNetwork).To(BeFalse())
		Expect(container(ds.Spec.Template.Spec.Containers, "agent").Ports[0].HostPort).To(BeZero())
		Expect(*container(ds.Spec.Template.Spec.Containers, "agent").SecurityContext.Privileged).To(BeFalse())
	})

	It("runs the controller with its sidecars on a pod-local socket, with the seed's ports and leader election", Label("S-CT-1", "S-CT-2", "S-CT-3", "S-CT-4", "S-GL-5"), func() {
		dep := decode[appsv1.Deployment](find(render(map[string]any{"controller": map[string]any{"replicaCount": 3}}), "Deployment", "pillar-pillar-csi-controller"))
		Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3))
		spec := dep.Spec.Template.Spec
		var names []string
		for _, c := range spec.Containers {
			names = append(names, c.Name)
			for _, a := range c.Args {
				if strings.HasPrefix(a, "--csi-address") {
					Expect(a).To(Equal("--csi-address=/csi/csi.sock"))
				}
			}
			if c.Name != "liveness-probe" {
				Expect(c.Args).To(ContainElement(Or(Equal("--leader-elect"), Equal("--leader-election"))), c.Name)
			}
		}
		Expect(names).To(Equal([]string{"manager", "csi-attacher", "csi-provisioner", "csi-resizer", "liveness-probe"}))
		Expect(spec.Volumes).To(ContainElement(And(HaveField("Name", "socket-dir"), HaveField("VolumeSource.EmptyDir", Not(BeNil())))))
		m := container(spec.Containers, "manager")
		Expect(m.Args).To(ContainElements("--csi-endpoint=unix:///csi/csi.sock", "--health-probe-bind-address=:8081", "--metrics-bind-address=:8080",
			"--webhook-port=9443", "--webhook-cert-dir=/tmp/k8s-webhook-server/serving-certs"))
		Expect(container(spec.Containers, "liveness-probe").Args).To(ContainElement("--http-endpoint=:9809"))
		Expect(container(spec.Containers, "csi-provisioner").Args).To(ContainElement("--extra-create-metadata"))
		dep = decode[appsv1.Deployment](find(render(map[string]any{"controller": map[string]any{"sidecars": map[string]any{"provisioner": map[string]any{"extraArgs": []any{"--timeout=30s"}}}}}),
			"Deployment", "pillar-pillar-csi-controller"))
		Expect(container(dep.Spec.Template.Spec.Containers, "csi-provisioner").Args).To(ContainElements("--extra-create-metadata", "--timeout=30s"))
		// Webhooks: validating and mutating, a serving certificate, off on request.
		objs := render(nil)
		vw := decode[admissionv1.ValidatingWebhookConfiguration](find(objs, "ValidatingWebhookConfiguration", "pillar-pillar-csi-validating"))
		Expect(vw.Webhooks[0].ClientConfig.CABundle).NotTo(BeEmpty())
		decode[admissionv1.MutatingWebhookConfiguration](find(objs, "MutatingWebhookConfiguration", "pillar-pillar-csi-mutating"))
		sec := decode[corev1.Secret](find(objs, "Secret", "pillar-pillar-csi-webhook-cert"))
		Expect(sec.Data).To(HaveKey("tls.crt"))
		for _, o := range render(map[string]any{"webhook": map[string]any{"enabled": false}}) {
			Expect(o.Kind).NotTo(ContainSubstring("Webhook"))
		}
	})

	It("creates the CSIDriver as configured, or not at all", Label("S-CSI-1"), func() {
		d := decode[storagev1.CSIDriver](find(render(nil), "CSIDriver", domain))
		Expect(*d.Spec.AttachRequired).To(BeTrue())
		Expect(*d.Spec.PodInfoOnMount).To(BeTrue())
		Expect(*d.Spec.FSGroupPolicy).To(Equal(storagev1.FileFSGroupPolicy))
		Expect(d.Spec.VolumeLifecycleModes).To(Equal([]storagev1.VolumeLifecycleMode{storagev1.VolumeLifecyclePersistent}))
		d = decode[storagev1.CSIDriver](find(render(map[string]any{"csiDriver": map[string]any{"fsGroupPolicy": "ReadWriteOnceWithFSType", "attachRequired": false}}), "CSIDriver", domain))
		Expect(*d.Spec.FSGroupPolicy).To(Equal(storagev1.ReadWriteOnceWithFSTypeFSGroupPolicy))
		Expect(*d.Spec.AttachRequired).To(BeFalse())
		for _, o := range render(map[string]any{"csiDriver": map[string]any{"create": false}}) {
			Expect(o.Kind).NotTo(Equal("CSIDriver"))
		}
	})

	// Staging over NVMe/TCP (S-ND-1) is behaviour: conformance/kind.
	It("renders the node plugin on the host network with the registrar, kubelet paths, nvme_fabrics before nvme_tcp and liveness 9808 without hostPort", Label("S-ND-2", "S-ND-3"), func() {
		ds := decode[appsv1.DaemonSet](find(render(nil), "DaemonSet", "pillar-pillar-csi-node"))
		spec := ds.Spec.Template.Spec
		Expect(spec.HostNetwork).To(BeTrue())
		Expect(spec.NodeSelector).To(BeEmpty())
		init := container(spec.InitContainers, "modprobe")
		Expect(init.Command[len(init.Command)-2:]).To(Equal([]string{"nvme_fabrics", "nvme_tcp"}))
		node := container(spec.Containers, "node")
		Expect(node.Args).To(ContainElement("--csi-endpoint=unix:///var/lib/kubelet/plugins/" + domain + "/csi.sock"))
		reg := container(spec.Containers, "node-driver-registrar")
		Expect(reg.Args).To(ContainElement("--kubelet-registration-path=/var/lib/kubelet/plugins/" + domain + "/csi.sock"))
		live := container(spec.Containers, "liveness-probe")
		Expect(live.Args).To(ContainElement("--http-endpoint=:9808"))
		Expect(live.Ports).To(ConsistOf(HaveField("HostPort", int32(0))))
		Expect(spec.Volumes).To(ContainElement(HaveField("VolumeSource.HostPath.Path", "/var/lib/kubelet/plugins_registry")))
		ds = decode[appsv1.DaemonSet](find(render(map[string]any{"node": map[string]any{"kubeletPluginRegistrationDir": "/k/registry", "kubeletPluginsDir": "/k/plugins",
			"csiSocketPath": "/k/plugins/x/csi.sock"}}), "DaemonSet", "pillar-pillar-csi-node"))
		Expect(ds.Spec.Template.Spec.Volumes).To(ContainElements(HaveField("VolumeSource.HostPath.Path", "/k/registry"), HaveField("VolumeSource.HostPath.Path", "/k")))
	})

	It("probes the node and controller plugins through their liveness sidecars (9808, 9809) and the agent on its own HTTP endpoint", Label("S-ND-3", "S-CT-2"), func() {
		objs := render(nil)
		probe := func(c corev1.Container) (string, int) {
			Expect(c.LivenessProbe).NotTo(BeNil(), c.Name)
			Expect(c.LivenessProbe.HTTPGet).NotTo(BeNil(), c.Name)
			return c.LivenessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Port.IntValue()
		}
		node := decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-node")).Spec.Template.Spec
		path, port := probe(container(node.Containers, "node"))
		Expect(path).To(Equal("/healthz"))
		Expect(port).To(Equal(9808))
		Expect(container(node.Containers, "liveness-probe").Args).To(ContainElement("--http-endpoint=:9808"))
		ctl := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller")).Spec.Template.Spec
		path, port = probe(container(ctl.Containers, "manager"))
		Expect(path).To(Equal("/healthz"))
		Expect(port).To(Equal(9809))
		Expect(container(ctl.Containers, "manager").ReadinessProbe.HTTPGet.Port.String()).To(Equal("healthz"))
		agent := decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-agent")).Spec.Template.Spec
		path, port = probe(container(agent.Containers, "agent"))
		Expect(path).To(Equal("/healthz"))
		Expect(port).To(Equal(9502))
		Expect(container(agent.Containers, "agent").Args).To(ContainElement("--health-listen=:9502"))

		objs = render(map[string]any{"node": map[string]any{"livenessPort": 9900}, "controller": map[string]any{"livenessPort": 9901}, "agent": map[string]any{"healthPort": 9902}})
		_, port = probe(container(decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-node")).Spec.Template.Spec.Containers, "node"))
		Expect(port).To(Equal(9900))
		_, port = probe(container(decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller")).Spec.Template.Spec.Containers, "manager"))
		Expect(port).To(Equal(9901))
		_, port = probe(container(decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-agent")).Spec.Template.Spec.Containers, "agent"))
		Expect(port).To(Equal(9902))
	})

	It("gives each node its own NVMe identity from the host's /etc/nvme and passes the reconnect defaults", func() {
		spec := decode[appsv1.DaemonSet](find(render(nil), "DaemonSet", "pillar-pillar-csi-node")).Spec.Template.Spec
		node := container(spec.Containers, "node")
		Expect(node.VolumeMounts).To(ContainElement(And(HaveField("Name", "nvme-config"), HaveField("MountPath", "/etc/nvme"), HaveField("ReadOnly", false))))
		dot := corev1.HostPathDirectoryOrCreate
		Expect(spec.Volumes).To(ContainElement(And(HaveField("Name", "nvme-config"), HaveField("VolumeSource.HostPath.Path", "/etc/nvme"),
			HaveField("VolumeSource.HostPath.Type", Equal(&dot)))))
		Expect(node.Args).To(ContainElements("--ctrl-loss-tmo=1800", "--reconnect-delay=10", "--fast-io-fail-tmo=120", "--keep-alive-tmo=5"))

		spec = decode[appsv1.DaemonSet](find(render(map[string]any{"node": map[string]any{"nvme": map[string]any{"hostConfigDir": "/var/lib/nvme", "ctrlLossTmo": -1, "reconnectDelay": 2,
			"fastIOFailTmo": -1, "keepAliveTmo": 15}}}),
			"DaemonSet", "pillar-pillar-csi-node")).Spec.Template.Spec
		Expect(spec.Volumes).To(ContainElement(And(HaveField("Name", "nvme-config"), HaveField("VolumeSource.HostPath.Path", "/var/lib/nvme"))))
		Expect(container(spec.Containers, "node").Args).To(ContainElements("--ctrl-loss-tmo=-1", "--reconnect-delay=2", "--fast-io-fail-tmo=-1", "--keep-alive-tmo=15"))
	})

	It("applies names, namespace, pull policy and pull secrets to all pods", Label("S-GL-1"), func() {
		objs := render(map[string]any{"fullnameOverride": "store", "namespaceOverride": "elsewhere", "imagePullPolicy": "Always",
			"imagePullSecrets": []any{map[string]any{"name": "regcred"}}, "agent": map[string]any{"image": map[string]any{"pullPolicy": "Never"}}})
		for _, o := range objs {
			md := o.Map["metadata"].(map[string]any)
			if ns, ok := md["namespace"]; ok {
				Expect(ns).To(Equal("elsewhere"), o.Kind+" "+o.Name)
			}
		}
		for kind, name := range map[string]string{"DaemonSet": "store-agent", "Deployment": "store-controller"} {
			o := find(objs, kind, name)
			var tmpl corev1.PodTemplateSpec
			if kind == "Deployment" {
				tmpl = decode[appsv1.Deployment](o).Spec.Template
			} else {
				tmpl = decode[appsv1.DaemonSet](o).Spec.Template
			}
			Expect(tmpl.Spec.ImagePullSecrets).To(Equal([]corev1.LocalObjectReference{{Name: "regcred"}}))
			for _, c := range append(tmpl.Spec.InitContainers, tmpl.Spec.Containers...) {
				want := corev1.PullAlways
				if kind == "DaemonSet" && c.Name == "agent" {
					want = corev1.PullNever
				}
				Expect(c.ImagePullPolicy).To(Equal(want), c.Name)
			}
		}
		find(objs, "DaemonSet", "store-node")
		objs = render(map[string]any{"nameOverride": "csi"})
		find(objs, "Deployment", "pillar-csi-controller")
		// Defaults: IfNotPresent everywhere.
		dep := decode[appsv1.Deployment](find(render(nil), "Deployment", "pillar-pillar-csi-controller"))
		Expect(dep.Spec.Template.Spec.Containers[0].ImagePullPolicy).To(Equal(corev1.PullIfNotPresent))
	})

	It("installs the CRDs with a keep-on-uninstall policy, or not at all", Label("S-GL-2"), func() {
		n := 0
		for _, o := range render(nil) {
			if o.Kind == "CustomResourceDefinition" {
				n++
				crd := decode[apiextv1.CustomResourceDefinition](o)
				Expect(crd.Annotations).To(HaveKeyWithValue("helm.sh/resource-policy", "keep"))
				Expect(crd.Spec.Group).To(Equal(domain))
			}
		}
		Expect(n).To(Equal(3))
		for _, o := range render(map[string]any{"installCRDs": false}) {
			Expect(o.Kind).NotTo(Equal("CustomResourceDefinition"))
		}
	})

	It("creates RBAC and service accounts with the seed's default names, as configured", Label("S-GL-3"), func() {
		objs := render(nil)
		for _, c := range []string{"agent", "controller", "node"} {
			find(objs, "ServiceAccount", "pillar-pillar-csi-"+c)
		}
		find(objs, "ClusterRole", "pillar-pillar-csi-controller")
		objs = render(map[string]any{"rbac": map[string]any{"create": false}, "serviceAccount": map[string]any{
			"controller": map[string]any{"name": "ctl", "annotations": map[string]any{"a": "b"}}, "node": map[string]any{"create": false, "name": "existing"}}})
		sa := decode[corev1.ServiceAccount](find(objs, "ServiceAccount", "ctl"))
		Expect(sa.Annotations).To(HaveKeyWithValue("a", "b"))
		for _, o := range objs {
			Expect(o.Kind).NotTo(ContainSubstring("Role"))
			Expect(o.Name).NotTo(Equal("existing"))
		}
		ds := decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-node"))
		Expect(ds.Spec.Template.Spec.ServiceAccountName).To(Equal("existing"))
	})

	// Issue 20.8: capacity tracking (off by default) and the agent's metrics
	// port (off by default).
	It("turns on storage capacity tracking with its provisioner flags, downward-API env and RBAC, or leaves it all out", func() {
		objs := render(map[string]any{"csiDriver": map[string]any{"storageCapacity": true}})
		d := decode[storagev1.CSIDriver](find(objs, "CSIDriver", domain))
		Expect(d.Spec.StorageCapacity).NotTo(BeNil())
		Expect(*d.Spec.StorageCapacity).To(BeTrue())
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		prov := container(dep.Spec.Template.Spec.Containers, "csi-provisioner")
		Expect(prov.Args).To(ContainElements("--enable-capacity", "--capacity-ownerref-level=2", "--capacity-poll-interval=1m"))
		Expect(prov.Env).To(ContainElements(
			And(HaveField("Name", "POD_NAME"), HaveField("ValueFrom.FieldRef.FieldPath", "metadata.name")),
			And(HaveField("Name", "NAMESPACE"), HaveField("ValueFrom.FieldRef.FieldPath", "metadata.namespace"))))
		role := decode[rbacv1.Role](find(objs, "Role", "pillar-pillar-csi-controller-capacity"))
		Expect(role.Rules).To(ContainElement(And(HaveField("APIGroups", []string{"storage.k8s.io"}), HaveField("Resources", []string{"csistoragecapacities"}),
			HaveField("Verbs", ContainElements("get", "list", "watch", "create", "update", "patch", "delete")))))
		Expect(role.Rules).To(ContainElement(HaveField("Resources", ContainElement("replicasets"))))
		rb := decode[rbacv1.RoleBinding](find(objs, "RoleBinding", "pillar-pillar-csi-controller-capacity"))
		Expect(rb.Subjects[0].Name).To(Equal("pillar-pillar-csi-controller"))

		objs = render(map[string]any{"csiDriver": map[string]any{"storageCapacity": false}})
		d = decode[storagev1.CSIDriver](find(objs, "CSIDriver", domain))
		Expect(*d.Spec.StorageCapacity).To(BeFalse())
		dep = decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		prov = container(dep.Spec.Template.Spec.Containers, "csi-provisioner")
		Expect(prov.Args).NotTo(ContainElement("--enable-capacity"))
		Expect(prov.Env).To(BeEmpty())
		for _, o := range objs {
			Expect(o.Name).NotTo(HaveSuffix("-capacity"))
		}
	})

	It("serves the agent's metrics on agent.metricsPort when set, and opens no port by default", func() {
		ds := decode[appsv1.DaemonSet](find(render(nil), "DaemonSet", "pillar-pillar-csi-agent"))
		agent := container(ds.Spec.Template.Spec.Containers, "agent")
		Expect(agent.Args).NotTo(ContainElement(HavePrefix("--metrics-listen")))
		Expect(agent.Ports).To(HaveLen(1))
		ds = decode[appsv1.DaemonSet](find(render(map[string]any{"agent": map[string]any{"metricsPort": 9501}}), "DaemonSet", "pillar-pillar-csi-agent"))
		agent = container(ds.Spec.Template.Spec.Containers, "agent")
		Expect(agent.Args).To(ContainElement("--metrics-listen=:9501"))
		Expect(agent.Ports).To(ContainElement(And(HaveField("Name", "metrics"), HaveField("ContainerPort", int32(9501)), HaveField("HostPort", int32(0)))))
	})

	It("renders a ServiceMonitor only when enabled, with its labels and interval", Label("S-GL-4"), func() {
		for _, o := range render(nil) {
			Expect(o.Kind).NotTo(Equal("ServiceMonitor"))
		}
		sm := find(render(map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true, "interval": "15s",
			"additionalLabels": map[string]any{"release": "prom"}}}}), "ServiceMonitor", "pillar-pillar-csi-controller")
		Expect(sm.Map["metadata"].(map[string]any)["labels"]).To(HaveKeyWithValue("release", "prom"))
		ep := sm.Map["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		Expect(ep).To(HaveKeyWithValue("interval", "15s"))
		Expect(ep).To(HaveKeyWithValue("port", "metrics"))
	})

	It("protects controller-to-agent gRPC with mTLS in both modes", Label("S-TLS-1", "S-TLS-2", "S-TLS-3", "S-TLS-4"), func() {
		// Off: plaintext, no certificates mounted.
		objs := render(nil)
		agent := container(decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-agent")).Spec.Template.Spec.Containers, "agent")
		Expect(strings.Join(agent.Args, " ")).NotTo(ContainSubstring("mtls"))
		// Operator secrets.
		objs = render(map[string]any{"mtls": map[string]any{"enabled": true}})
		ds := decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-agent"))
		Expect(ds.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", "driver-agent-mtls")))
		Expect(container(ds.Spec.Template.Spec.Containers, "agent").Args).To(ContainElement("--mtls-cert-dir=/etc/pillar-csi/mtls"))
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		Expect(dep.Spec.Template.Spec.Volumes).To(ContainElement(HaveField("VolumeSource.Secret.SecretName", "driver-controller-mtls")))
		for _, o := range objs {
			Expect(o.Kind).NotTo(Equal("Certificate"))
		}
		Expect(strings.Join(container(dep.Spec.Template.Spec.Containers, "manager").Args, " ")).NotTo(ContainSubstring("--mtls-server-name"))
		objs = render(map[string]any{"mtls": map[string]any{"enabled": true, "serverName": "agents.example"}})
		dep = decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		Expect(container(dep.Spec.Template.Spec.Containers, "manager").Args).To(ContainElement("--mtls-server-name=agents.example"))
		// cert-manager: a self-signed issuer (via a CA) and two certificates.
		objs = render(map[string]any{"mtls": map[string]any{"enabled": true, "certManager": map[string]any{"enabled": true}}})
		find(objs, "Issuer", "pillar-pillar-csi-selfsigned")
		for _, side := range []string{"controller", "agent"} {
			cert := find(objs, "Certificate", "pillar-pillar-csi-"+side+"-mtls").Map["spec"].(map[string]any)
			Expect(cert).To(HaveKeyWithValue("secretName", "pillar-pillar-csi-"+side+"-mtls"))
			Expect(cert).To(HaveKeyWithValue("duration", "2160h"))
			Expect(cert).To(HaveKeyWithValue("renewBefore", "360h"))
			Expect(cert["issuerRef"]).To(HaveKeyWithValue("name", "pillar-pillar-csi-mtls"))
		}
		agentCert := find(objs, "Certificate", "pillar-pillar-csi-agent-mtls").Map["spec"].(map[string]any)
		Expect(agentCert["dnsNames"]).To(ConsistOf("pillar-pillar-csi-agent.storage.svc"))
		dep = decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller"))
		Expect(container(dep.Spec.Template.Spec.Containers, "manager").Args).To(ContainElement("--mtls-server-name=pillar-pillar-csi-agent.storage.svc"))
		// A given issuer: no self-signed one.
		objs = render(map[string]any{"mtls": map[string]any{"enabled": true, "certManager": map[string]any{"enabled": true,
			"issuerRef": map[string]any{"group": "cert-manager.io", "kind": "ClusterIssuer", "name": "corp-ca"}}}})
		for _, o := range objs {
			Expect(o.Kind).NotTo(Equal("Issuer"))
		}
		Expect(find(objs, "Certificate", "pillar-pillar-csi-agent-mtls").Map["spec"].(map[string]any)["issuerRef"]).To(HaveKeyWithValue("kind", "ClusterIssuer"))
	})

	It("sets every container's requests and limits exactly as the Limits table", Label("S-LIM-1"), func() {
		objs := render(nil)
		want := map[string]corev1.ResourceRequirements{
			"agent/agent":                resources([2]string{"10m", "64Mi"}, [2]string{"500m", "256Mi"}),
			"agent/modprobe":             resources([2]string{"5m", "16Mi"}, [2]string{"50m", "32Mi"}),
			"node/modprobe":              resources([2]string{"5m", "16Mi"}, [2]string{"50m", "32Mi"}),
			"controller/manager":         resources([2]string{"10m", "64Mi"}, [2]string{"500m", "128Mi"}),
			"controller/csi-attacher":    resources([2]string{"10m", "32Mi"}, [2]string{"100m", "64Mi"}),
			"controller/csi-provisioner": resources([2]string{"10m", "32Mi"}, [2]string{"100m", "64Mi"}),
			"controller/csi-resizer":     resources([2]string{"10m", "32Mi"}, [2]string{"100m", "64Mi"}),
			"controller/liveness-probe":  resources([2]string{"5m", "16Mi"}, [2]string{"50m", "32Mi"}),
			"node/liveness-probe":        resources([2]string{"5m", "16Mi"}, [2]string{"50m", "32Mi"}),
			"node/node":                  resources([2]string{"10m", "64Mi"}, [2]string{"500m", "256Mi"}),
			"node/node-driver-registrar": resources([2]string{"10m", "32Mi"}, [2]string{"100m", "64Mi"}),
		}
		got := map[string]corev1.ResourceRequirements{}
		add := func(comp string, spec corev1.PodSpec) {
			for _, c := range append(spec.InitContainers, spec.Containers...) {
				got[comp+"/"+c.Name] = c.Resources
			}
		}
		add("agent", decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-agent")).Spec.Template.Spec)
		add("node", decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-node")).Spec.Template.Spec)
		add("controller", decode[appsv1.Deployment](find(objs, "Deployment", "pillar-pillar-csi-controller")).Spec.Template.Spec)
		Expect(got).To(HaveLen(len(want)))
		for k, w := range want {
			g := got[k]
			for _, res := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				gr, wr := g.Requests[res], w.Requests[res]
				gl, wl := g.Limits[res], w.Limits[res]
				Expect(gr.Cmp(wr)).To(BeZero(), "%s requests %s", k, res)
				Expect(gl.Cmp(wl)).To(BeZero(), "%s limits %s", k, res)
			}
		}
	})

	It("resolves empty image tags to appVersion and uses the seed's sidecar tags", Label("S-VER-1"), func() {
		objs := render(nil)
		images := map[string]string{}
		for kind, name := range map[string]string{"DaemonSet": "pillar-pillar-csi-agent", "Deployment": "pillar-pillar-csi-controller"} {
			var spec corev1.PodSpec
			if kind == "Deployment" {
				spec = decode[appsv1.Deployment](find(objs, kind, name)).Spec.Template.Spec
			} else {
				spec = decode[appsv1.DaemonSet](find(objs, kind, name)).Spec.Template.Spec
			}
			for _, c := range spec.Containers {
				images[c.Name] = c.Image
			}
		}
		for _, c := range decode[appsv1.DaemonSet](find(objs, "DaemonSet", "pillar-pillar-csi-node")).Spec.Template.Spec.Containers {
			images["node/"+c.Name] = c.Image
		}
		Expect(images).To(Equal(map[string]string{
			"agent":                      "ghcr.io/pillarhq/pillar-csi/agent:0.3.3",
			"manager":                    "ghcr.io/pillarhq/pillar-csi/controller:0.3.3",
			"csi-attacher":               "registry.k8s.io/sig-storage/csi-attacher:v4.12.0",
			"csi-provisioner":            "registry.k8s.io/sig-storage/csi-provisioner:v6.3.0",
			"csi-resizer":                "registry.k8s.io/sig-storage/csi-resizer:v2.2.1",
			"liveness-probe":             "registry.k8s.io/sig-storage/livenessprobe:v2.19.0",
			"node/node":                  "ghcr.io/pillarhq/pillar-csi/node:0.3.3",
			"node/node-driver-registrar": "registry.k8s.io/sig-storage/csi-node-driver-registrar:v2.17.0",
			"node/liveness-probe":        "registry.k8s.io/sig-storage/livenessprobe:v2.19.0",
		}))
		ds := decode[appsv1.DaemonSet](find(render(map[string]any{"agent": map[string]any{"image": map[string]any{"tag": "dev"}}}), "DaemonSet", "pillar-pillar-csi-agent"))
		Expect(container(ds.Spec.Template.Spec.Containers, "agent").Image).To(HaveSuffix(":dev"))
	})

	It("keeps its README values table and values.schema.json generated from values.yaml", func() {
		dir := charts.Dir("pillar-csi")
		readme, schema, err := chartdoc.Generate(dir)
		Expect(err).NotTo(HaveOccurred())
		cur, _ := os.ReadFile(filepath.Join(dir, "README.md"))
		Expect(string(cur)).To(Equal(string(readme)), "README.md is stale: run make chart-docs")
		cur, _ = os.ReadFile(filepath.Join(dir, "values.schema.json"))
		Expect(string(cur)).To(Equal(string(schema)), "values.schema.json is stale: run make chart-docs")
		vals, _, err := chartdoc.Read(filepath.Join(dir, "values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		// Every key of the seed's tables is there.
		Expect(chartdoc.Keys(vals)).To(ContainElements("agent.backends", "agent.hostPort", "agent.initModprobe.modules",
			"controller.sidecars.provisioner.extraArgs", "csiDriver.volumeLifecycleModes", "node.kubeletPluginRegistrationDir",
			"node.sidecars.nodeDriverRegistrar.image.tag", "metrics.serviceMonitor.interval", "serviceAccount.node.name",
			"webhook.certDir", "mtls.certManager.issuerRef", "mtls.secretRefs.agent.secretName", "mtls.serverName", "installCRDs"))
	})
})

// The prose of docs/ names chart defaults as "`key` (default X)"; each
// such default is the one values.yaml holds, so the docs cannot drift from
// the chart (they once said csiDriver.storageCapacity defaults to true).
var _ = It("states in docs/ the defaults values.yaml holds", func() {
	vals, _, err := chartdoc.Read(filepath.Join(charts.Dir("pillar-csi"), "values.yaml"))
	Expect(err).NotTo(HaveOccurred())
	defaults := map[string]string{}
	for _, v := range vals {
		defaults[v.Key] = strings.Trim(v.Default, `"`)
	}
	stated := regexp.MustCompile("`([a-zA-Z][a-zA-Z0-9]*(?:\\.[a-zA-Z0-9]+)+)`\\s*\\(default `?([^,):`\\s]+)")
	docs, err := filepath.Glob(filepath.Join(charts.Dir("pillar-csi"), "..", "..", "docs", "*.md"))
	Expect(err).NotTo(HaveOccurred())
	Expect(docs).NotTo(BeEmpty())
	checked := 0
	for _, f := range docs {
		b, err := os.ReadFile(f)
		Expect(err).NotTo(HaveOccurred())
		for _, m := range stated.FindAllStringSubmatch(string(b), -1) {
			want, ok := defaults[m[1]]
			if !ok {
				continue // not a key of this chart
			}
			checked++
			Expect(m[2]).To(Equal(want), "%s says %s defaults to %s; values.yaml holds %s", filepath.Base(f), m[1], m[2], want)
		}
	}
	Expect(checked).To(BeNumerically(">=", 3), "the docs' stated defaults were found")
})

func yamlOf(j []byte) (string, error)     { return charts.YAML(j) }
func yamlUnmarshal(s string, v any) error { return charts.UnmarshalYAML(s, v) }
