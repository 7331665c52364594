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
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"flag"
	"fmt"
	"log"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/pillarhq/pillar/conformance/harness/runner"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/mtls"
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

func main() {
	binDir := flag.String("bin-dir", "bin", "directory holding pillar-agent-sim")
	n := flag.Int("n", 50, "CreateVolume calls per pool")
	rttN := flag.Int("rtt-n", 3000, "empty calls per transport")
	out := flag.String("out", "", "markdown fragment to write")
	flag.Parse()
	log.SetFlags(0)
	dir, err := os.MkdirTemp("", "agentbench-")
	check(err)
	defer os.RemoveAll(dir)

	certs := filepath.Join(dir, "certs")
	check(issue(certs))
	cfg := filepath.Join(dir, "agent.yaml")
	check(os.WriteFile(cfg, []byte(config), 0o644))
	simRoot := filepath.Join(dir, "node")
	r := runner.Process{Dir: *binDir}
	start := func(label, root string, extra ...string) (*runner.Proc, string) {
		addr := freeAddr()
		args := append([]string{"--config", cfg, "--listen", addr, "--sim-root", root, "--sim-pool-size", "20G"}, extra...)
		p, err := r.Start("pillar-agent-sim", args, runner.Options{Label: label})
		check(err)
		return p, addr
	}
	secure, secureAddr := start("agent-mtls", simRoot, "--mtls-cert-dir", certs)
	defer secure.Stop()
	tc, err := mtls.Client(certs, "localhost")
	check(err)
	conn := dial(secure, secureAddr, credentials.NewTLS(tc))
	defer conn.Close()
	// The plaintext agent, on a node of its own, only answers health
	// checks here.
	plain, plainAddr := start("agent-plain", filepath.Join(dir, "node-plain"))
	defer plain.Stop()
	pconn := dial(plain, plainAddr, insecure.NewCredentials())
	defer pconn.Close()

	// In turns of 100, so drift in the machine's load falls on both.
	warm(conn)
	warm(pconn)
	var rttTLS, rttPlain []time.Duration
	for done := 0; done < *rttN; done += 100 {
		rttTLS = append(rttTLS, emptyCalls(conn, 100)...)
		rttPlain = append(rttPlain, emptyCalls(pconn, 100)...)
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
		before := cpuTime(secure.Pid())
		creates[pc.pool] = createVolumes(c, pc.pool, *n)
		cpu[pc.pool] = (cpuTime(secure.Pid()) - before) / time.Duration(*n+3)
	}
	listPools := make([]time.Duration, 0, *n)
	for range *n {
		t0 := time.Now()
		_, err := c.ListPools(context.Background(), &agentv1.ListPoolsRequest{})
		listPools = append(listPools, time.Since(t0))
		check(err)
	}
	tool := toolCalls(filepath.Join(simRoot, "bin", "vgs"), filepath.Join(simRoot, "state"), *n)

	var b strings.Builder
	fmt.Fprintf(&b, "| measure | calls | p50 | p99 | CPU a call | target | met |\n|---|---:|---:|---:|---:|---|---|\n")
	for _, pc := range pools {
		d := creates[pc.pool]
		fmt.Fprintf(&b, "| CreateVolume, %s: %s | %d | %s | %s | %s | p50 < %s | %s |\n", pc.label, pc.note, len(d), ms(pct(d, 50)), ms(pct(d, 99)), ms(cpu[pc.pool]), ms(createTarget), met(pct(d, 50) < createTarget))
	}
	fmt.Fprintf(&b, "| ListPools (the controller's readiness check before each create; 3 pools, each asked at once) | %d | %s | %s | | | |\n", len(listPools), ms(pct(listPools, 50)), ms(pct(listPools, 99)))
	fmt.Fprintf(&b, "| one simulated tool call (`vgs`, a process of pillar-agent-sim) | %d | %s | %s | | | |\n", len(tool), ms(pct(tool, 50)), ms(pct(tool, 99)))
	fmt.Fprintf(&b, "| empty gRPC call (health check), mTLS, one connection | %d | %s | %s | | p99 < %s | %s |\n", len(rttTLS), us(pct(rttTLS, 50)), us(pct(rttTLS, 99)), ms(rttTarget), met(pct(rttTLS, 99) < rttTarget))
	fmt.Fprintf(&b, "| empty gRPC call, plaintext (baseline) | %d | %s | %s | | | |\n", len(rttPlain), us(pct(rttPlain, 50)), us(pct(rttPlain, 99)))
	fmt.Fprintf(&b, "\nmTLS ÷ plaintext, p99: %.2fx. CreateVolume p50 in simulated tool calls: LVM thin %.1f, LVM linear %.1f, ZFS %.1f.\n",
		ratio(pct(rttTLS, 99), pct(rttPlain, 99)),
		ratio(pct(creates["vg0"], 50), pct(tool, 50)), ratio(pct(creates["vg1"], 50), pct(tool, 50)), ratio(pct(creates["tank"], 50), pct(tool, 50)))
	fmt.Print(b.String())
	if *out != "" {
		check(os.WriteFile(*out, []byte(b.String()), 0o644))
	}
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	check(err)
	defer l.Close()
	return l.Addr().String()
}

// dial connects and waits until the agent answers a health check.
func dial(p *runner.Proc, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	check(err)
	h := healthpb.NewHealthClient(conn)
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := h.Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil {
			return conn
		}
		if p.Exited() || time.Now().After(deadline) {
			log.Fatalf("%s did not serve: %v\n%s", p.Name, err, p.Output())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func warm(conn *grpc.ClientConn) {
	h := healthpb.NewHealthClient(conn)
	for range 200 {
		_, err := h.Check(context.Background(), &healthpb.HealthCheckRequest{})
		check(err)
	}
}

// emptyCalls times health checks one after another on one connection.
func emptyCalls(conn *grpc.ClientConn, n int) []time.Duration {
	h := healthpb.NewHealthClient(conn)
	ctx := context.Background()
	req := &healthpb.HealthCheckRequest{}
	d := make([]time.Duration, 0, n)
	for range n {
		t0 := time.Now()
		_, err := h.Check(ctx, req)
		d = append(d, time.Since(t0))
		check(err)
	}
	return d
}

// createVolumes times n creates of new 32 MiB volumes, after three
// unmeasured ones (the first reads the extent size).
func createVolumes(c agentv1.AgentServiceClient, pool string, n int) []time.Duration {
	ctx := context.Background()
	d := make([]time.Duration, 0, n)
	for i := range n + 3 {
		t0 := time.Now()
		_, err := c.CreateVolume(ctx, &agentv1.CreateVolumeRequest{Pool: pool, Name: fmt.Sprintf("bench-%d", i), SizeBytes: 32 << 20})
		el := time.Since(t0)
		if err != nil {
			log.Fatalf("CreateVolume on %s: %v", pool, err)
		}
		if i >= 3 {
			d = append(d, el)
		}
	}
	return d
}

// toolCalls times the simulated vgs run directly, as the agent runs it.
func toolCalls(vgs, state string, n int) []time.Duration {
	d := make([]time.Duration, 0, n)
	for range n {
		cmd := exec.Command(vgs, "--reportformat", "json", "--units", "b", "--nosuffix", "-o", "vg_name,vg_size,vg_free,vg_extent_size", "vg0")
		cmd.Env = []string{"FAKESTORAGE_STATE=" + state, "LC_ALL=C"}
		t0 := time.Now()
		out, err := cmd.CombinedOutput()
		d = append(d, time.Since(t0))
		if err != nil {
			log.Fatalf("vgs: %v\n%s", err, out)
		}
	}
	return d
}

// cpuTime is the CPU a process and its waited-for children (the tool
// processes) have used, from /proc: a figure the machine's other load
// moves much less than wall time.
func cpuTime(pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	check(err)
	// Fields after the command name, which is in parentheses: utime is
	// the 14th field, then stime, cutime, cstime, in clock ticks (100 a
	// second on Linux).
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	var ticks int64
	for _, i := range []int{11, 12, 13, 14} {
		var v int64
		if _, err := fmt.Sscan(f[i], &v); err != nil {
			log.Fatalf("/proc stat field %d: %v", i, err)
		}
		ticks += v
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func pct(d []time.Duration, p int) time.Duration {
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	i := (len(s)*p + 99) / 100
	return s[max(0, min(len(s)-1, i-1))]
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond)) }
func us(d time.Duration) string { return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond)) }

func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**missed**"
}

// issue writes a throwaway CA and one leaf for localhost, used by both
// ends (the chart's agent and controller certificates come from one CA
// too).
func issue(dir string) error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "agentbench CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		DNSNames:    []string{"localhost"}, IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		return err
	}
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	for name, block := range map[string]*pem.Block{
		mtls.CertFile: {Type: "CERTIFICATE", Bytes: der},
		mtls.KeyFile:  {Type: "EC PRIVATE KEY", Bytes: kb},
		mtls.CAFile:   {Type: "CERTIFICATE", Bytes: caDER},
	} {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(block), 0o600); err != nil {
			return err
		}
	}
	return nil
}
