package charts_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"

	"github.com/pillarhq/pillar/conformance/charts"
	"github.com/pillarhq/pillar/conformance/charts/chartdoc"
)

// withScrape enables the ServiceMonitor with its scrape-token Secret.
var withScrape = map[string]any{
	"metrics":            map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
	"metricsTokenSecret": map[string]any{"name": "proxy-metrics", "key": "token"},
}

var _ = Describe("proxy chart", func() {
	renderProxy := func(vals map[string]any) []charts.Object {
		objs, err := charts.Render("proxy", vals)
		ExpectWithOffset(1, err).NotTo(HaveOccurred())
		return objs
	}

	It("lints clean and decodes strictly", func() {
		res := lint.All(charts.Dir("proxy"), map[string]any{}, "gw", false)
		for _, m := range res.Messages {
			Expect(m.Severity).To(BeNumerically("<", support.WarningSev), m.Error())
		}
		decodeAll(renderProxy(nil))
		decodeAll(renderProxy(withScrape))
	})

	It("runs replicas on PostgreSQL with secrets, separate proxy and admin Services, probes, a PDB and the budget flags", Label("P-LIM-1", "P-LISTEN-2"), func() {
		objs := renderProxy(nil)
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-proxy"))
		Expect(*dep.Spec.Replicas).To(BeEquivalentTo(3))
		Expect(dep.Spec.Strategy.RollingUpdate.MaxUnavailable.IntValue()).To(BeZero())
		c := dep.Spec.Template.Spec.Containers[0]
		Expect(c.Args).To(ContainElements("--proxy-listen=:8080", "--admin-listen=:9090", "--main-pool=10", "--scheduler-pool=5", "--replicas=3"))
		env := map[string]*corev1.SecretKeySelector{}
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
				env[e.Name] = e.ValueFrom.SecretKeyRef
			}
		}
		Expect(env).To(HaveKey("PROXY_DATABASE_URL"))
		Expect(env).To(HaveKey("PROXY_ADMIN_TOKEN"))
		Expect(env).To(HaveKey("PROXY_MASTER_KEY"))
		Expect(env["PROXY_DATABASE_URL"].Name).To(Equal("proxy-database"))
		Expect(c.ReadinessProbe.HTTPGet.Path).To(Equal("/readyz"))
		Expect(c.ReadinessProbe.HTTPGet.Port.String()).To(Equal("admin"), "readiness stays reachable during the drain")
		proxySvc := decode[corev1.Service](find(objs, "Service", "pillar-proxy"))
		adminSvc := decode[corev1.Service](find(objs, "Service", "pillar-proxy-admin"))
		Expect(proxySvc.Spec.Ports[0].Port).To(BeEquivalentTo(8080))
		Expect(adminSvc.Spec.Ports[0].Port).To(BeEquivalentTo(9090))
		pdb := decode[policyv1.PodDisruptionBudget](find(objs, "PodDisruptionBudget", "pillar-proxy"))
		Expect(pdb.Spec.MinAvailable.IntValue()).To(Equal(1))
		values, err := os.ReadFile(filepath.Join(charts.Dir("proxy"), "values.yaml"))
		Expect(err).NotTo(HaveOccurred())
		Expect(string(values)).To(ContainSubstring("0.7 * the server's max_connections"), "the connection-budget rule is in the values' comments")
		sm := find(renderProxy(withScrape), "ServiceMonitor", "pillar-proxy")
		Expect(sm.Map["spec"].(map[string]any)["endpoints"].([]any)[0]).To(HaveKeyWithValue("path", "/metrics"))
	})

	It("passes one grace period to the pod and, less the preStop pause and a margin, to the proxy's drain", func() {
		for _, tc := range []struct {
			vals  map[string]any
			grace int64
			drain string
		}{
			{nil, 30, "--drain-timeout=22s"},
			{map[string]any{"terminationGracePeriodSeconds": 120}, 120, "--drain-timeout=112s"},
			{map[string]any{"terminationGracePeriodSeconds": 60, "preStopSeconds": 10}, 60, "--drain-timeout=47s"},
		} {
			dep := decode[appsv1.Deployment](find(renderProxy(tc.vals), "Deployment", "pillar-proxy"))
			Expect(*dep.Spec.Template.Spec.TerminationGracePeriodSeconds).To(Equal(tc.grace))
			Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement(tc.drain))
		}
		_, err := charts.Render("proxy", map[string]any{"terminationGracePeriodSeconds": 8})
		Expect(err).To(MatchError(ContainSubstring("terminationGracePeriodSeconds must exceed")))
	})

	It("scrapes with the read-only metrics token through the authorization field, never the admin token", func() {
		objs := renderProxy(withScrape)
		ep := find(objs, "ServiceMonitor", "pillar-proxy").Map["spec"].(map[string]any)["endpoints"].([]any)[0].(map[string]any)
		Expect(ep).NotTo(HaveKey("bearerTokenSecret"))
		Expect(ep["authorization"]).To(Equal(map[string]any{"type": "Bearer",
			"credentials": map[string]any{"name": "proxy-metrics", "key": "token"}}))
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-proxy"))
		var ref *corev1.SecretKeySelector
		for _, e := range dep.Spec.Template.Spec.Containers[0].Env {
			if e.Name == "PROXY_METRICS_TOKEN" {
				ref = e.ValueFrom.SecretKeyRef
			}
		}
		Expect(ref).NotTo(BeNil())
		Expect(ref.Name).To(Equal("proxy-metrics"))
		// Without a scrape token the ServiceMonitor is refused, not given
		// the admin token.
		_, err := charts.Render("proxy", map[string]any{"metrics": map[string]any{"serviceMonitor": map[string]any{"enabled": true}}})
		Expect(err).To(MatchError(ContainSubstring("metricsTokenSecret.name")))
		for _, e := range decode[appsv1.Deployment](find(renderProxy(nil), "Deployment", "pillar-proxy")).Spec.Template.Spec.Containers[0].Env {
			Expect(e.Name).NotTo(Equal("PROXY_METRICS_TOKEN"))
		}
	})

	// Everything optional switched on, for the golden render and the
	// strict decoding.
	full := map[string]any{
		"metrics":            map[string]any{"serviceMonitor": map[string]any{"enabled": true}},
		"metricsTokenSecret": map[string]any{"name": "proxy-metrics", "key": "token"},
		"ingress": map[string]any{"enabled": true, "className": "nginx",
			"hosts": []any{map[string]any{"host": "llm.example.org"}},
			"tls":   []any{map[string]any{"secretName": "llm-tls", "hosts": []any{"llm.example.org"}}}},
		"autoscaling":    map[string]any{"enabled": true, "minReplicas": 2, "maxReplicas": 5},
		"grafana":        map[string]any{"dashboard": map[string]any{"enabled": true}},
		"prometheusRule": map[string]any{"enabled": true},
	}

	It("renders as its golden files, defaults and everything enabled", func() {
		goldenOf("proxy", "proxy-defaults", nil)
		goldenOf("proxy", "proxy-full", full)
		decodeAll(renderProxy(full))
		// The values the kind e2e installs the chart with (conformance/kind).
		decodeAll(renderProxy(map[string]any{"proxy": map[string]any{"serviceType": "NodePort"}, "extraArgs": []any{"--allow-private-upstreams"}}))
		res := lint.All(charts.Dir("proxy"), full, "gw", false)
		for _, m := range res.Messages {
			Expect(m.Severity).To(BeNumerically("<", support.WarningSev), m.Error())
		}
	})

	It("runs non-root on a read-only root filesystem with no capabilities, RuntimeDefault seccomp and a writable /tmp", func() {
		dep := decode[appsv1.Deployment](find(renderProxy(nil), "Deployment", "pillar-proxy"))
		pod := dep.Spec.Template.Spec
		Expect(*pod.SecurityContext.RunAsNonRoot).To(BeTrue())
		Expect(*pod.SecurityContext.RunAsUser).NotTo(BeZero(), "the image (FROM scratch) has no USER: the pod names a non-root uid")
		Expect(pod.SecurityContext.SeccompProfile.Type).To(Equal(corev1.SeccompProfileTypeRuntimeDefault))
		c := pod.Containers[0]
		Expect(*c.SecurityContext.ReadOnlyRootFilesystem).To(BeTrue())
		Expect(*c.SecurityContext.AllowPrivilegeEscalation).To(BeFalse())
		Expect(c.SecurityContext.Capabilities.Drop).To(ConsistOf(corev1.Capability("ALL")))
		Expect(c.VolumeMounts).To(ContainElement(corev1.VolumeMount{Name: "tmp", MountPath: "/tmp"}))
		Expect(pod.Volumes).To(HaveLen(1))
		Expect(pod.Volumes[0].EmptyDir).NotTo(BeNil())
	})

	It("gives the Go runtime the container's memory limit (the proxy runs with GOGC 400)", func() {
		gomemlimit := func(vals map[string]any) *corev1.EnvVar {
			c := decode[appsv1.Deployment](find(renderProxy(vals), "Deployment", "pillar-proxy")).Spec.Template.Spec.Containers[0]
			for i := range c.Env {
				if c.Env[i].Name == "GOMEMLIMIT" {
					return &c.Env[i]
				}
			}
			return nil
		}
		e := gomemlimit(nil)
		Expect(e).NotTo(BeNil())
		Expect(e.ValueFrom.ResourceFieldRef.Resource).To(Equal("limits.memory"))
		Expect(e.ValueFrom.ResourceFieldRef.ContainerName).To(Equal("proxy"))
		Expect(e.ValueFrom.ResourceFieldRef.Divisor.String()).To(Equal("1"), "bytes, as GOMEMLIMIT reads a plain number")
		Expect(gomemlimit(map[string]any{"resources": map[string]any{"limits": map[string]any{"memory": nil}}})).To(BeNil(), "no limit, no GOMEMLIMIT")
	})

	It("runs under its own ServiceAccount without a mounted API token", func() {
		objs := renderProxy(nil)
		sa := decode[corev1.ServiceAccount](find(objs, "ServiceAccount", "pillar-proxy"))
		Expect(*sa.AutomountServiceAccountToken).To(BeFalse())
		pod := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-proxy")).Spec.Template.Spec
		Expect(pod.ServiceAccountName).To(Equal("pillar-proxy"))
		Expect(*pod.AutomountServiceAccountToken).To(BeFalse())
		pod = decode[appsv1.Deployment](find(renderProxy(map[string]any{"serviceAccount": map[string]any{"create": false, "name": "shared"}}),
			"Deployment", "pillar-proxy")).Spec.Template.Spec
		Expect(pod.ServiceAccountName).To(Equal("shared"))
	})

	It("labels every object with helm.sh/chart", func() {
		for _, o := range renderProxy(full) {
			labels := o.Map["metadata"].(map[string]any)["labels"]
			Expect(labels).To(HaveKeyWithValue("helm.sh/chart", "proxy-0.1.0"), "%s %s", o.Kind, o.Name)
		}
	})

	It("adds an Ingress to the proxy port and an autoscaler only when asked, checking the connection budget for the most replicas", func() {
		for _, o := range renderProxy(nil) {
			Expect(o.Kind).NotTo(BeElementOf("Ingress", "HorizontalPodAutoscaler", "ConfigMap"))
		}
		objs := renderProxy(full)
		ing := decode[networkingv1.Ingress](find(objs, "Ingress", "pillar-proxy"))
		Expect(*ing.Spec.IngressClassName).To(Equal("nginx"))
		Expect(ing.Spec.Rules).To(HaveLen(1))
		Expect(ing.Spec.Rules[0].Host).To(Equal("llm.example.org"))
		path := ing.Spec.Rules[0].HTTP.Paths[0]
		Expect(path.Path).To(Equal("/"))
		Expect(path.Backend.Service.Name).To(Equal("pillar-proxy"), "the proxy Service, never the admin one")
		Expect(path.Backend.Service.Port.Name).To(Equal("proxy"))
		Expect(ing.Spec.TLS[0].SecretName).To(Equal("llm-tls"))
		hpa := decode[autoscalingv2.HorizontalPodAutoscaler](find(objs, "HorizontalPodAutoscaler", "pillar-proxy"))
		Expect(*hpa.Spec.MinReplicas).To(BeEquivalentTo(2))
		Expect(hpa.Spec.MaxReplicas).To(BeEquivalentTo(5))
		Expect(hpa.Spec.ScaleTargetRef.Name).To(Equal("pillar-proxy"))
		dep := decode[appsv1.Deployment](find(objs, "Deployment", "pillar-proxy"))
		Expect(dep.Spec.Replicas).To(BeNil(), "the autoscaler owns the replica count")
		Expect(dep.Spec.Template.Spec.Containers[0].Args).To(ContainElement("--replicas=5"))
		_, err := charts.Render("proxy", map[string]any{"autoscaling": map[string]any{"enabled": true, "minReplicas": 4, "maxReplicas": 2}})
		Expect(err).To(MatchError(ContainSubstring("maxReplicas must be at least")))
	})

	It("ships the Grafana dashboard in a ConfigMap labelled for Grafana's sidecar when enabled", func() {
		cm := decode[corev1.ConfigMap](find(renderProxy(full), "ConfigMap", "pillar-proxy-grafana-dashboard"))
		Expect(cm.Labels).To(HaveKeyWithValue("grafana_dashboard", "1"))
		var dash map[string]any
		Expect(json.Unmarshal([]byte(cm.Data["pillar-proxy.json"]), &dash)).To(Succeed())
		Expect(dash).To(HaveKeyWithValue("uid", "pillar-proxy"))
		want, err := os.ReadFile(filepath.Join(charts.Dir("proxy"), "dashboards", "proxy.json"))
		Expect(err).NotTo(HaveOccurred())
		Expect(cm.Data["pillar-proxy.json"]).To(MatchJSON(want))
	})

	It("prints NOTES that say where clients and the admin API are", func() {
		notes, err := charts.RenderNotes("proxy", nil)
		Expect(err).NotTo(HaveOccurred())
		Expect(notes).To(ContainSubstring("http://pillar-proxy.storage.svc:8080/v1/messages"))
		Expect(notes).To(ContainSubstring("port-forward svc/pillar-proxy-admin 9090:9090"))
		notes, err = charts.RenderNotes("proxy", full)
		Expect(err).NotTo(HaveOccurred())
		Expect(notes).To(ContainSubstring("https://llm.example.org/v1/messages"))
		Expect(notes).To(ContainSubstring("2-5 replicas, autoscaled"))
		Expect(notes).To(ContainSubstring("grafana_dashboard=1"))
		Expect(notes).To(ContainSubstring("PrometheusRule pillar-proxy"))
	})

	It("keeps its README values table and schema generated", func() {
		dir := charts.Dir("proxy")
		readme, schema, err := chartdoc.Generate(dir)
		Expect(err).NotTo(HaveOccurred())
		cur, _ := os.ReadFile(filepath.Join(dir, "README.md"))
		Expect(string(cur)).To(Equal(string(readme)))
		cur, _ = os.ReadFile(filepath.Join(dir, "values.schema.json"))
		Expect(string(cur)).To(Equal(string(schema)))
		_, err = charts.Render("proxy", map[string]any{"replicaCount": "three"})
		Expect(err).To(MatchError(ContainSubstring("schema")))
		Expect(strings.Contains(string(readme), "database.urlSecret")).To(BeTrue())
	})
})
