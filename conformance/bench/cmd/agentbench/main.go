// Command agentbench measures the pillar agent on simulated storage (make
// bench): CreateVolume p50/p99 on an LVM thin pool, an LVM linear group
// and a ZFS pool, and the round trip of an empty gRPC call (the health
// check, which touches no storage) over mTLS on one reused connection,
// against the same call in plaintext. It starts bin/pillar-agent-sim as
// a process (its storage tools are processes too, links to the same
// binary, as in the kind e2e), so every tool call pays a process start;
// the cost of one such call is measured alongside, as the unit the
// CreateVolume figures are made of.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pillarhq/pillar/conformance/bench"
	"github.com/pillarhq/pillar/conformance/harness"
	"github.com/pillarhq/pillar/conformance/harness/runner"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/mtls"
	"github.com/pillarhq/pillar/impl/testing/waitfor"
)

// Targets of issue 22 (part 6).
const (
	createTarget = 50 * time.Millisecond
	rttTarget    = time.Millisecond
)

const config = `backends:
  - lvm:
      volumeGroup: vg0
      thinPool: thin
      provisioningMode: thin
  - lvm:
      volumeGroup: vg1
  - zfs:
      pool: tank
      parentDataset: k8s
`

func main() { bench.Main("agentbench", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("agentbench", flag.ContinueOnError)
	binDir := fs.String("bin-dir", "bin", "directory holding pillar-agent-sim")
	n := fs.Int("n", 50, "CreateVolume calls per pool")
	rttN := fs.Int("rtt-n", 3000, "empty calls per transport")
	out := fs.String("out", "", "markdown fragment to write")
	if err := fs.Parse(args); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "agentbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	certs := filepath.Join(dir, "certs")
	ca, err := harness.MakeCA("agentbench CA")
	if err == nil {
		err = ca.IssueFiles(certs, "localhost", []string{"localhost"}, "127.0.0.1")
	}
	if err != nil {
		return err
	}
	cfg := filepath.Join(dir, "agent.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		return err
	}
	simRoot := filepath.Join(dir, "node")
	st := &bench.Stack{Runner: runner.Process{Dir: *binDir}, Dir: dir}
	defer st.Stop()
	// dial starts an agent and connects once it answers a health check.
	dial := func(label, root string, creds credentials.TransportCredentials, extra ...string) (*runner.Proc, *grpc.ClientConn, error) {
		addr, err := harness.ListenAddr()
		if err != nil {
			return nil, nil, err
		}
		p, err := st.Start(label, "pillar-agent-sim", append([]string{"--config", cfg, "--listen", addr, "--sim-root", root, "--sim-pool-size", "20G"}, extra...), nil)
		if err != nil {
			return nil, nil, err
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			return nil, nil, err
		}
		h := healthpb.NewHealthClient(conn)
		wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		err = waitfor.Poll(wctx, 100*time.Millisecond, func() error {
			if p.Exited() {
				cancel()
				return fmt.Errorf("exited:\n%s", p.Output())
			}
			cctx, done := context.WithTimeout(wctx, 2*time.Second)
			defer done()
			_, err := h.Check(cctx, &healthpb.HealthCheckRequest{})
			return err
		})
		if err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("%s did not serve: %w", label, err)
		}
		return p, conn, nil
	}
	tc, err := mtls.Client(certs, "localhost")
	if err != nil {
		return err
	}
	secure, conn, err := dial("agent-mtls", simRoot, credentials.NewTLS(tc), "--mtls-cert-dir", certs)
	if err != nil {
		return err
	}
	defer conn.Close()
	// The plaintext agent, on a node of its own, only answers health
	// checks here.
	_, pconn, err := dial("agent-plain", filepath.Join(dir, "node-plain"), insecure.NewCredentials())
	if err != nil {
		return err
	}
	defer pconn.Close()

	// In turns of 100, so drift in the machine's load falls on both.
	if _, err := emptyCalls(ctx, conn, 200); err != nil {
		return err
	}
	if _, err := emptyCalls(ctx, pconn, 200); err != nil {
		return err
	}
	var rttTLS, rttPlain []time.Duration
	for done := 0; done < *rttN; done += 100 {
		a, err := emptyCalls(ctx, conn, 100)
		if err != nil {
			return err
		}
		b, err := emptyCalls(ctx, pconn, 100)
		if err != nil {
			return err
		}
		rttTLS, rttPlain = append(rttTLS, a...), append(rttPlain, b...)
	}

	c := agentv1.NewAgentServiceClient(conn)
	type poolCase struct{ label, pool, note string }
	pools := []poolCase{
		{"LVM thin (vg0/thin)", "vg0", "lvcreate"},
		{"LVM linear (vg1)", "vg1", "lvcreate, blkdiscard -z, lvchange"},
		{"ZFS (tank/k8s)", "tank", "zfs create, zfs list"},
	}
	creates := map[string][]time.Duration{}
	cpu := map[string]time.Duration{}
	for _, pc := range pools {
		before, err := bench.ReadProc(secure.Pid())
		if err != nil {
			return err
		}
		if creates[pc.pool], err = createVolumes(ctx, c, pc.pool, *n); err != nil {
			return err
		}
		after, err := bench.ReadProc(secure.Pid())
		if err != nil {
			return err
		}
		cpu[pc.pool] = (after.CPU + after.ChildCPU - before.CPU - before.ChildCPU) / time.Duration(*n+3)
	}
	listPools := make([]time.Duration, 0, *n)
	for range *n {
		t0 := time.Now()
		if _, err := c.ListPools(ctx, &agentv1.ListPoolsRequest{}); err != nil {
			return err
		}
		listPools = append(listPools, time.Since(t0))
	}
	tool, err := toolCalls(filepath.Join(simRoot, "bin", "vgs"), filepath.Join(simRoot, "state"), *n)
	if err != nil {
		return err
	}

	pct := func(d []time.Duration, p int) time.Duration { return bench.Percentile(d, float64(p)/100) }
	var b strings.Builder
	fmt.Fprintf(&b, "| measure | calls | p50 | p99 | CPU a call | target | met |\n|---|---:|---:|---:|---:|---|---|\n")
	for _, pc := range pools {
		d := creates[pc.pool]
		fmt.Fprintf(&b, "| CreateVolume, %s: %s | %d | %s | %s | %s | p50 < %s | %s |\n", pc.label, pc.note, len(d), msText(pct(d, 50)), msText(pct(d, 99)), msText(cpu[pc.pool]), msText(createTarget), bench.MetMark(pct(d, 50) < createTarget))
	}
	fmt.Fprintf(&b, "| ListPools (the controller's readiness check before each create; 3 pools, each asked at once) | %d | %s | %s | | | |\n", len(listPools), msText(pct(listPools, 50)), msText(pct(listPools, 99)))
	fmt.Fprintf(&b, "| one simulated tool call (`vgs`, a process of pillar-agent-sim) | %d | %s | %s | | | |\n", len(tool), msText(pct(tool, 50)), msText(pct(tool, 99)))
	fmt.Fprintf(&b, "| empty gRPC call (health check), mTLS, one connection | %d | %s | %s | | p99 < %s | %s |\n", len(rttTLS), us(pct(rttTLS, 50)), us(pct(rttTLS, 99)), msText(rttTarget), bench.MetMark(pct(rttTLS, 99) < rttTarget))
	fmt.Fprintf(&b, "| empty gRPC call, plaintext (baseline) | %d | %s | %s | | | |\n", len(rttPlain), us(pct(rttPlain, 50)), us(pct(rttPlain, 99)))
	fmt.Fprintf(&b, "\nmTLS ÷ plaintext, p99: %.2fx. CreateVolume p50 in simulated tool calls: LVM thin %.1f, LVM linear %.1f, ZFS %.1f.\n",
		ratio(pct(rttTLS, 99), pct(rttPlain, 99)),
		ratio(pct(creates["vg0"], 50), pct(tool, 50)), ratio(pct(creates["vg1"], 50), pct(tool, 50)), ratio(pct(creates["tank"], 50), pct(tool, 50)))
	return bench.Emit(b.String(), *out)
}

// emptyCalls times health checks one after another on one connection.
func emptyCalls(ctx context.Context, conn *grpc.ClientConn, n int) ([]time.Duration, error) {
	h := healthpb.NewHealthClient(conn)
	req := &healthpb.HealthCheckRequest{}
	d := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		if _, err := h.Check(ctx, req); err != nil {
			return nil, err
		}
		d = append(d, time.Since(t0))
	}
	return d, nil
}

// createVolumes times n creates of new 32 MiB volumes, after three
// unmeasured ones (the first reads the extent size).
func createVolumes(ctx context.Context, c agentv1.AgentServiceClient, pool string, n int) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for i := range n + 3 {
		t0 := time.Now()
		_, err := c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{Pool: pool, Name: fmt.Sprintf("bench-%d", i), SizeBytes: 32 << 20})
		el := time.Since(t0)
		if err != nil {
			return nil, fmt.Errorf("CreateVolume on %s: %w", pool, err)
		}
		if i >= 3 {
			d = append(d, el)
		}
	}
	return d, nil
}

// toolCalls times the simulated vgs run directly, as the agent runs it.
func toolCalls(vgs, state string, n int) ([]time.Duration, error) {
	d := make([]time.Duration, 0, n)
	for range n {
		cmd := exec.Command(vgs, "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "vg_name,vg_size,vg_free,vg_extent_size", "vg0")
		cmd.Env = []string{"FAKESTORAGE_STATE=" + state, "LC_ALL=C"}
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d = append(d, time.Since(t0))
		if err != nil {
			return nil, fmt.Errorf("vgs: %w\n%s", err, out)
		}
	}
	return d, nil
}

func msText(d time.Duration) string { return fmt.Sprintf("%.1f ms", bench.Ms(d)) }
func us(d time.Duration) string     { return fmt.Sprintf("%.0f µs", bench.Micros(d)) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}
