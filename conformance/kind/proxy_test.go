//go:build kinde2e

package kind_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/pillarhq/pillar/conformance/charts"
	h "github.com/pillarhq/pillar/conformance/harness"
)

const llmNS = "llm"

// deploy creates a one-replica Deployment and a Service for it.
func deploy(c context.Context, name, image string, args []string, env map[string]string, port int32) {
	labels := map[string]string{"app": name}
	var envs []corev1.EnvVar
	for k, v := range env {
		envs = append(envs, corev1.EnvVar{Name: k, Value: v})
	}
	d := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: llmNS},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr(int32(1)),
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: name, Image: image, ImagePullPolicy: corev1.PullIfNotPresent, Args: args, Env: envs,
					Ports:          []corev1.ContainerPort{{ContainerPort: port}},
					ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{TCPSocket: &corev1.TCPSocketAction{Port: intstr.FromInt32(port)}}, PeriodSeconds: 1},
				}}},
			},
		},
	}
	_, err := kc.Client.AppsV1().Deployments(llmNS).Create(c, d, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	service(c, name, labels, port, corev1.ServiceTypeClusterIP)
}

func service(c context.Context, name string, selector map[string]string, port int32, typ corev1.ServiceType) *corev1.Service {
	s, err := kc.Client.CoreV1().Services(llmNS).Create(c, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: llmNS},
		Spec: corev1.ServiceSpec{Type: typ, Selector: selector,
			Ports: []corev1.ServicePort{{Port: port, TargetPort: intstr.FromInt32(port)}}},
	}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	return s
}

func secret(c context.Context, name, key, value string) {
	_, err := kc.Client.CoreV1().Secrets(llmNS).Create(c, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: llmNS}, StringData: map[string]string{key: value}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}

func waitDeployment(c context.Context, name string) {
	Eventually(func(g Gomega) {
		d, err := kc.Client.AppsV1().Deployments(llmNS).Get(c, name, metav1.GetOptions{})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(d.Status.ObservedGeneration).To(BeNumerically(">=", d.Generation))
		g.Expect(d.Status.UpdatedReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.ReadyReplicas).To(Equal(*d.Spec.Replicas))
		g.Expect(d.Status.Replicas).To(Equal(*d.Spec.Replicas), "old pods still there")
	}, 4*time.Minute, time.Second).Should(Succeed())
}

var _ = Describe("the proxy installed by its chart", Ordered, Label("P-RUNTIME-1", "P-RUNTIME-3"), func() {
	const body = `{"model":"claude-x","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`
	var (
		proxyURL string
		key      string
	)

	BeforeAll(func() {
		c := ctx()
		_, err := kc.Client.CoreV1().Namespaces().Create(c, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: llmNS}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		simKey := "sk-sim-" + h.RandomHex(8)
		deploy(c, "postgres", "pillar/postgres:15-local", nil, map[string]string{"POSTGRES_MAX_CONNECTIONS": "200"}, 5432)
		deploy(c, "sim", "pillar/sim:local", []string{"--listen", ":8089", "--allow-remote", "--api-key", simKey}, nil, 8089)
		token := "adm-" + h.RandomHex(12)
		secret(c, "proxy-database", "url", "postgres://postgres@postgres."+llmNS+".svc:5432/postgres?sslmode=disable")
		secret(c, "proxy-admin", "token", token)
		secret(c, "proxy-master-key", "key", h.RandomHex(32))
		waitDeployment(c, "postgres")
		waitDeployment(c, "sim")

		Expect(kc.Helm(c, "proxy", llmNS, charts.Dir("proxy"), map[string]any{
			"proxy": map[string]any{"serviceType": "NodePort"},
			// The simulator is an in-cluster Service (a private address).
			"extraArgs": []any{"--allow-private-upstreams"},
		}, 4*time.Minute)).To(Succeed())
		waitDeployment(c, "proxy")

		ip, err := kc.NodeIP()
		Expect(err).NotTo(HaveOccurred())
		svc, err := kc.Client.CoreV1().Services(llmNS).Get(c, "proxy", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(svc.Spec.Type).To(Equal(corev1.ServiceTypeNodePort))
		proxyURL = fmt.Sprintf("http://%s:%d", ip, svc.Spec.Ports[0].NodePort)
		// The chart keeps the admin API on a ClusterIP Service; the test
		// reaches it through a NodePort Service of its own.
		adm := service(c, "proxy-admin-e2e", map[string]string{"app.kubernetes.io/name": "proxy", "app.kubernetes.io/instance": "proxy"}, 9090, corev1.ServiceTypeNodePort)
		admin := &h.Admin{Base: fmt.Sprintf("http://%s:%d", ip, adm.Spec.Ports[0].NodePort), Token: token}
		Eventually(func() int { st, _, _ := admin.Do("GET", "/admin/v1/upstreams", nil); return st }, time.Minute, time.Second).Should(Equal(200))
		admin.CreateUpstream("sim", "http://sim."+llmNS+".svc:8089", simKey)
		principal := admin.CreatePrincipal("app", "*")
		_, key = admin.IssueKey(principal)
	})

	It("serves a request through the Service from PostgreSQL-backed replicas", func() {
		Eventually(func() int { st, _, _ := h.Messages(proxyURL, body, "x-api-key", key); return st }, 30*time.Second, 200*time.Millisecond).Should(Equal(200))
		pods, err := kc.Client.CoreV1().Pods(llmNS).List(ctx(), metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=proxy"})
		Expect(err).NotTo(HaveOccurred())
		Expect(pods.Items).To(HaveLen(3))
	})

	It("restarts every replica under a trickle of requests without failing one", func() {
		c := ctx()
		// A new connection per request, as independent clients make them;
		// kube-proxy balances connections, not requests.
		client := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
		var sent, bad atomic.Int64
		var mu sync.Mutex
		var failures []string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				req, _ := http.NewRequest("POST", proxyURL+"/v1/messages", strings.NewReader(body))
				req.Header.Set("x-api-key", key)
				req.Header.Set("content-type", "application/json")
				req.Header.Set("anthropic-version", "2023-06-01")
				sent.Add(1)
				resp, err := client.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				if err != nil || resp.StatusCode != 200 {
					bad.Add(1)
					mu.Lock()
					if err != nil {
						failures = append(failures, err.Error())
					} else {
						failures = append(failures, resp.Status)
					}
					mu.Unlock()
				}
			}
		}()
		patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"kubectl.kubernetes.io/restartedAt":%q}}}}}`, time.Now().Format(time.RFC3339))
		_, err := kc.Client.AppsV1().Deployments(llmNS).Patch(c, "proxy", types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{})
		Expect(err).NotTo(HaveOccurred())
		waitDeployment(c, "proxy")
		close(stop)
		wg.Wait()
		GinkgoWriter.Printf("rolling restart: %d requests, %d failed\n", sent.Load(), bad.Load())
		Expect(sent.Load()).To(BeNumerically(">", 50))
		Expect(failures).To(BeEmpty())
	})
})
