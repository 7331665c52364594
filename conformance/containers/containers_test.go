// Package containers runs the multi-replica deployment in containers built
// offline by scripts/images.sh: PostgreSQL, three proxy replicas and the
// provider sim on private networks, driven with testcontainers-go.
package containers_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/testcontainers/testcontainers-go"
	"github.com/testcontainers/testcontainers-go/network"
	"github.com/testcontainers/testcontainers-go/wait"

	h "github.com/pillarhq/pillar/conformance/harness"
)

func TestContainers(t *testing.T) {
	RegisterFailHandler(Fail)
	RunSpecs(t, "Multi-replica deployment in containers")
}

const simKey = "sk-sim-containers"

var _ = BeforeSuite(func() {
	// testcontainers must talk to our own engine and containers only.
	os.Setenv("TESTCONTAINERS_RYUK_DISABLED", "true")
	os.Setenv("TESTCONTAINERS_HOST_OVERRIDE", "127.0.0.1")
	for _, img := range []string{"pillar/postgres:15-local", "pillar/proxy:local", "pillar/sim:local"} {
		out, err := runDocker("image", "inspect", img)
		Expect(err).NotTo(HaveOccurred(), "image %s missing: run scripts/images.sh (%s)", img, out)
	}
})

// deployment is PostgreSQL on dbnet, the sim on appnet, replicas on both.
type deployment struct {
	ctx      context.Context
	appnet   *testcontainers.DockerNetwork
	dbnet    *testcontainers.DockerNetwork
	pg       testcontainers.Container
	sim      testcontainers.Container
	replicas []testcontainers.Container
	token    string
}

func start(ctx context.Context, req testcontainers.ContainerRequest) testcontainers.Container {
	c, err := testcontainers.GenericContainer(ctx, testcontainers.GenericContainerRequest{ContainerRequest: req, Started: true})
	if err != nil && c != nil {
		if rc, lerr := c.Logs(context.Background()); lerr == nil {
			b, _ := io.ReadAll(rc)
			GinkgoWriter.Printf("\n----- logs of %s (failed to start) -----\n%s\n", req.Name, redact(string(b)))
		}
		testcontainers.TerminateContainer(c)
	}
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			if rc, err := c.Logs(context.Background()); err == nil {
				b, _ := io.ReadAll(rc)
				GinkgoWriter.Printf("\n----- logs of %s -----\n%s\n", req.Name, redact(string(b)))
			}
		}
		testcontainers.TerminateContainer(c)
	})
	return c
}

var secrets []string

func redact(s string) string {
	for _, sec := range secrets {
		s = strings.ReplaceAll(s, sec, "[REDACTED]")
	}
	return s
}

func newDeployment(replicas int) *deployment {
	ctx := context.Background()
	d := &deployment{ctx: ctx, token: "adm-" + h.RandomHex(12)}
	master := h.RandomHex(32)
	secrets = append(secrets, d.token, master, simKey)
	var err error
	d.appnet, err = network.New(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { d.appnet.Remove(context.Background()) })
	d.dbnet, err = network.New(ctx)
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(func() { d.dbnet.Remove(context.Background()) })
	suffix := h.RandomHex(4)

	d.pg = start(ctx, testcontainers.ContainerRequest{
		Name: "pg-" + suffix, Image: "pillar/postgres:15-local",
		Env:            map[string]string{"POSTGRES_MAX_CONNECTIONS": "200", "POSTGRES_FSYNC": "on"},
		Networks:       []string{d.dbnet.Name},
		NetworkAliases: map[string][]string{d.dbnet.Name: {"db"}},
		WaitingFor:     wait.ForLog("database system is ready to accept connections").WithStartupTimeout(60 * time.Second),
	})
	d.sim = start(ctx, testcontainers.ContainerRequest{
		Name: "sim-" + suffix, Image: "pillar/sim:local", Cmd: []string{"--listen", ":8089", "--allow-remote", "--api-key", simKey},
		Networks:       []string{d.appnet.Name},
		NetworkAliases: map[string][]string{d.appnet.Name: {"sim"}},
		WaitingFor:     wait.ForLog("sim listening"),
	})
	for i := 0; i < replicas; i++ {
		d.replicas = append(d.replicas, start(ctx, testcontainers.ContainerRequest{
			Name: fmt.Sprintf("proxy-%d-%s", i, suffix), Image: "pillar/proxy:local",
			Cmd: []string{"--proxy-listen", ":8080", "--admin-listen", ":9090", "--database-url", "postgres://postgres@db:5432/postgres?sslmode=disable",
				"--replica-id", fmt.Sprintf("r%d", i), "--replicas", "3", "--reconcile-interval", "2s", "--log-format", "json",
				"--allow-private-upstreams"}, // the simulator is on the compose network
			Env:        map[string]string{"PROXY_ADMIN_TOKEN": d.token, "PROXY_MASTER_KEY": master},
			Networks:   []string{d.appnet.Name, d.dbnet.Name},
			WaitingFor: wait.ForLog(`"listener":"admin"`).WithStartupTimeout(60 * time.Second),
		}))
	}
	return d
}

// ip is a container's address on the app network, reachable from the host.
func (d *deployment) ip(c testcontainers.Container) string {
	ins, err := c.Inspect(d.ctx)
	Expect(err).NotTo(HaveOccurred())
	n, ok := ins.NetworkSettings.Networks[d.appnet.Name]
	Expect(ok).To(BeTrue())
	return n.IPAddress.String()
}

func (d *deployment) admin(i int) *h.Admin {
	return &h.Admin{Base: "http://" + d.ip(d.replicas[i]) + ":9090", Token: d.token}
}

func (d *deployment) proxyURL(i int) string { return "http://" + d.ip(d.replicas[i]) + ":8080" }

const body = `{"model":"claude-x","max_tokens":4,"messages":[{"role":"user","content":"hi"}]}`

func (d *deployment) status(i int, key string) int {
	st, _, _ := h.Messages(d.proxyURL(i), body, "x-api-key", key)
	return st
}

// seed creates an upstream to the sim, a principal and a key through replica 0.
func (d *deployment) seed() (principal, key string) {
	a := d.admin(0)
	a.CreateUpstream("sim", "http://sim:8089", simKey)
	principal = a.CreatePrincipal("app", "*")
	_, key = a.IssueKey(principal)
	secrets = append(secrets, key)
	for i := range d.replicas {
		Eventually(func() int { return d.status(i, key) }, 5*time.Second, 20*time.Millisecond).Should(Equal(200))
	}
	return principal, key
}

var _ = Describe("Replicas in containers", Label("P-RUNTIME-3", "P-RUNTIME-4"), func() {
	It("enforces a change through any replica on all of them within a second", func() {
		d := newDeployment(3)
		pr, key := d.seed()
		d.admin(1).JSON("POST", "/admin/v1/principals/"+pr+"/disable", nil, 200)
		for i := range d.replicas {
			Eventually(func() int { return d.status(i, key) }, time.Second, 10*time.Millisecond).Should(Equal(403))
		}
	})

	It("keeps serving a replica cut off from the database and converges after reconnecting", func() {
		d := newDeployment(2)
		pr, key := d.seed()
		cut := d.replicas[1]
		Expect(d.dbnet.Name).NotTo(BeEmpty())
		_, err := runDocker("network", "disconnect", d.dbnet.Name, containerName(d.ctx, cut))
		Expect(err).NotTo(HaveOccurred())
		// Cut off, it still serves from its snapshot…
		for k := 0; k < 10; k++ {
			Expect(d.status(1, key)).To(Equal(200))
		}
		// …while a change lands through the other replica; the cut-off one
		// cannot hear the notification.
		d.admin(0).JSON("POST", "/admin/v1/principals/"+pr+"/disable", nil, 200)
		Consistently(func() int { return d.status(1, key) }, 2*time.Second, 100*time.Millisecond).Should(Equal(200))
		_, err = runDocker("network", "connect", d.dbnet.Name, containerName(d.ctx, cut))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() int { return d.status(1, key) }, 30*time.Second, 100*time.Millisecond).Should(Equal(403))
	})

	It("loses no committed change when the database restarts under load", func() {
		d := newDeployment(2)
		d.seed()
		var mu sync.Mutex
		var committed []string
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for w := 0; w < 2; w++ {
			wg.Add(1)
			go func(w int) {
				defer GinkgoRecover()
				defer wg.Done()
				for n := 0; ; n++ {
					select {
					case <-stop:
						return
					default:
					}
					name := fmt.Sprintf("load-%d-%d", w, n)
					st, _, b := d.admin(w).Do("POST", "/admin/v1/principals", map[string]any{"name": name, "kind": "machine"})
					if st == 201 {
						mu.Lock()
						committed = append(committed, name)
						mu.Unlock()
					} else {
						Expect(st).To(Equal(503), string(b)) // refused while the database is away, never half-applied
						time.Sleep(50 * time.Millisecond)
					}
				}
			}(w)
		}
		time.Sleep(time.Second)
		_, err := runDocker("restart", "-t", "5", containerName(d.ctx, d.pg))
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() int { st, _, _ := d.admin(0).Do("GET", "/admin/v1/status", nil); return st }, 60*time.Second, 200*time.Millisecond).Should(Equal(200))
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		Expect(len(committed)).To(BeNumerically(">", 5))
		var list []map[string]any
		st, _, b := d.admin(1).Do("GET", "/admin/v1/principals", nil)
		Expect(st).To(Equal(200))
		Expect(json.Unmarshal(b, &list)).To(Succeed())
		have := map[string]bool{}
		for _, p := range list {
			have[p["name"].(string)] = true
		}
		for _, name := range committed {
			Expect(have).To(HaveKey(name), "a committed principal was lost")
		}
	})
})

func containerName(ctx context.Context, c testcontainers.Container) string {
	n, err := c.Name(ctx)
	Expect(err).NotTo(HaveOccurred())
	return strings.TrimPrefix(n, "/")
}

func runDocker(args ...string) (string, error) {
	return h.RunCommand("docker", args...)
}

var _ = Describe("Replicas in containers, under stress", func() {
	It("lets exactly one of concurrent conflicting writes through different replicas win", Label("P-API-2"), func() {
		d := newDeployment(3)
		up := d.admin(0).CreateUpstream("sim", "http://sim:8089", simKey)
		h.ExpectOneWinner([]*h.Admin{d.admin(0), d.admin(1), d.admin(2)}, up, 9)
	})

	It("fails only the stream of a replica killed mid-stream", func() {
		d := newDeployment(2)
		_, key := d.seed()
		slow := `{"model":"claude-x","max_tokens":50,"stream":true,"messages":[{"role":"user","content":"one two three four five"}]}`
		open := func(i int) *bufio.Reader {
			req, _ := http.NewRequest("POST", d.proxyURL(i)+"/v1/messages", strings.NewReader(slow))
			req.Header.Set("x-api-key", key)
			req.Header.Set("anthropic-version", "2023-06-01")
			req.Header.Set("x-sim-fault", "first_event_delay_ms=1500")
			res, err := http.DefaultClient.Do(req)
			Expect(err).NotTo(HaveOccurred())
			Expect(res.StatusCode).To(Equal(200))
			DeferCleanup(res.Body.Close)
			rd := bufio.NewReader(res.Body)
			line, err := rd.ReadString('\n')
			Expect(err).NotTo(HaveOccurred())
			Expect(line).To(HavePrefix("event: message_start"))
			return rd
		}
		doomed, survivor := open(0), open(1)
		_, err := runDocker("kill", containerName(d.ctx, d.replicas[0]))
		Expect(err).NotTo(HaveOccurred())
		_, err = io.ReadAll(doomed)
		Expect(err).To(HaveOccurred(), "the killed replica's stream must end in an error")
		rest, err := io.ReadAll(survivor)
		Expect(err).NotTo(HaveOccurred())
		Expect(string(rest)).To(ContainSubstring("event: message_stop"))
		Expect(d.status(1, key)).To(Equal(200))
	})
})
