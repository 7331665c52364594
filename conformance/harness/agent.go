package harness

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
)

// AgentOptions configure a pillar-agent on simulated storage.
type AgentOptions struct {
	// Config is the agent configuration file's text.
	Config string
	// SimRoot is the simulated node's directory; empty makes a fresh one.
	SimRoot string
	// PoolSize, when set, has the agent create missing pools and groups.
	PoolSize string
	// MTLSDir enables mTLS with the certificates in it.
	MTLSDir string
	// Args are extra flags.
	Args []string
}

// Agent is a running bin/pillar-agent-sim on simulated storage.
type Agent struct {
	*Proc
	Addr    string
	SimRoot string
	opts    AgentOptions
}

// StartAgent starts pillar-agent-sim (pillar-agent with the simulators,
// conformance/simnode) with --sim-root and waits until it serves.
func StartAgent(o AgentOptions) *Agent {
	dir := GinkgoT().TempDir()
	if o.SimRoot == "" {
		o.SimRoot = filepath.Join(dir, "node")
	}
	cfg := filepath.Join(dir, "config.yaml")
	Expect(os.WriteFile(cfg, []byte(o.Config), 0o644)).To(Succeed())
	a := &Agent{Addr: FreeAddr(), SimRoot: o.SimRoot, opts: o}
	o.Args = append([]string{"--config", cfg, "--listen", a.Addr, "--sim-root", o.SimRoot}, o.Args...)
	if o.PoolSize != "" {
		o.Args = append(o.Args, "--sim-pool-size", o.PoolSize)
	}
	if o.MTLSDir != "" {
		o.Args = append(o.Args, "--mtls-cert-dir", o.MTLSDir)
	}
	a.opts = o
	a.launch()
	return a
}

func (a *Agent) launch() {
	a.Proc = Start("pillar-agent", Bin("pillar-agent-sim"), a.opts.Args, nil)
	Eventually(func() []map[string]any { return LogEvents(a.Proc, "msg", "agent_started") }, 20*time.Second, 50*time.Millisecond).
		ShouldNot(BeEmpty(), "agent did not start:\n%s", a.Output())
}

// Restart stops the agent (SIGTERM, or SIGKILL when crash) and starts it
// again on the same simulated node.
func (a *Agent) Restart(crash bool) {
	if crash {
		a.Kill()
	} else {
		a.Stop()
	}
	a.launch()
}

// Reboot stands for the storage node's reboot (issue 20.2): the agent is
// killed and started again on a fresh, empty target (the simulated
// configfs's state removed, as the kernel loses it), its pools and
// volumes kept.
func (a *Agent) Reboot() {
	a.Kill()
	Expect(os.Remove(filepath.Join(a.SimRoot, "configfs.json"))).To(Or(Succeed(), MatchError(os.ErrNotExist)))
	a.launch()
}

// Client dials the agent in plaintext.
func (a *Agent) Client() agentv1.AgentServiceClient {
	return a.ClientWith(insecure.NewCredentials())
}

// ClientTLS dials the agent with a TLS configuration.
func (a *Agent) ClientTLS(cfg *tls.Config) agentv1.AgentServiceClient {
	return a.ClientWith(credentials.NewTLS(cfg))
}

// ClientWith dials the agent with transport credentials.
func (a *Agent) ClientWith(creds credentials.TransportCredentials) agentv1.AgentServiceClient {
	conn, err := grpc.NewClient(a.Addr, grpc.WithTransportCredentials(creds))
	Expect(err).NotTo(HaveOccurred())
	DeferCleanup(conn.Close)
	return agentv1.NewAgentServiceClient(conn)
}

// Storage runs a fakestorage setup command on the agent's simulated node.
func (a *Agent) Storage(args ...string) string {
	return RunTool(Bin("fakestorage"), append([]string{"--state", filepath.Join(a.SimRoot, "state")}, args...), nil)
}

// Ctx is a context for one call.
func Ctx() context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	DeferCleanup(cancel)
	return ctx
}

// StartAgentAt starts an agent for a whole suite (outside any spec): its
// config and logs live in dir and it stops with StopDaemons.
func StartAgentAt(o AgentOptions, dir string) *Agent {
	cfg := filepath.Join(dir, "agent.yaml")
	Expect(os.WriteFile(cfg, []byte(o.Config), 0o644)).To(Succeed())
	a := &Agent{Addr: FreeAddr(), SimRoot: o.SimRoot}
	args := append([]string{"--config", cfg, "--listen", a.Addr, "--sim-root", o.SimRoot}, o.Args...)
	if o.PoolSize != "" {
		args = append(args, "--sim-pool-size", o.PoolSize)
	}
	a.Proc = StartDaemon("pillar-agent", Bin("pillar-agent-sim"), args)
	Eventually(func() []map[string]any { return LogEvents(a.Proc, "msg", "agent_started") }, 20*time.Second, 50*time.Millisecond).
		ShouldNot(BeEmpty(), "agent did not start:\n%s", a.Output())
	return a
}
