//go:build kernelguest

package guest

// The real pillar-agent on the real kernel (S-AG-10): LVM linear and thin
// and a ZFS zvol on the guest's virtual disks, exported through nvmet with
// a host ACL, connected with `nvme connect` over TCP loopback, data
// written and read back, an online resize, an agent crash and restart that
// keeps the exports, a storage node "reboot" (the target emptied) repaired
// by the controller's export recovery with I/O resuming, and a teardown
// that leaves nothing behind.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pillarhq/pillar/conformance/harness/runner"
	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/csiids"
	"github.com/pillarhq/pillar/impl/pillar/kubecontroller"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

const agentConfig = `backends:
  - lvm:
      volumeGroup: vgagent
      thinPool: thin
  - zfs:
      pool: tankagent
      parentDataset: k8s
`

const agentAddr = "127.0.0.1:9500"

// guestRunner starts the payload's binaries as real processes with the
// guest's whole environment (the agent crashes and restarts below).
var guestRunner = runner.Process{Dir: "/payload", InheritEnv: true}

type agentProc struct{ *runner.Proc }

func startAgent(t *testing.T, cfg string) *agentProc {
	t.Helper()
	bin := os.Getenv("PILLAR_AGENT")
	if bin == "" {
		bin = "pillar-agent"
	}
	logf, err := os.OpenFile("/tmp/agent.log", os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	proc, err := guestRunner.Start(bin, []string{"--config", cfg, "--listen", agentAddr, "--log-level", "debug"}, runner.Options{Log: logf})
	if err != nil {
		t.Fatal(err)
	}
	p := &agentProc{proc}
	t.Cleanup(func() { p.kill() })
	waitFor(t, "the agent to serve", 60*time.Second, func() bool {
		b, _ := os.ReadFile("/tmp/agent.log")
		return strings.Count(string(b), `"msg":"agent_started"`) > starts
	})
	starts++
	return p
}

var starts int

func (p *agentProc) kill() { p.Kill() }

func dial(t *testing.T) agentv1.AgentServiceClient {
	conn, err := grpc.NewClient(agentAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return agentv1.NewAgentServiceClient(conn)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func dumpAgentLog(t *testing.T) {
	if t.Failed() {
		b, _ := os.ReadFile("/tmp/agent.log")
		t.Logf("agent log:\n%s", b)
	}
}

func TestAgentEndToEnd(t *testing.T) {
	t.Cleanup(func() { dumpAgentLog(t) })
	resetTarget(t)
	// The storage node's disks: /dev/vdc for LVM, /dev/vdd for ZFS.
	sh(t, "pvcreate", "-q", "-y", "/dev/vdc")
	sh(t, "vgcreate", "-q", "vgagent", "/dev/vdc")
	sh(t, "lvcreate", "-q", "-y", "--type", "thin-pool", "-L", "1g", "-n", "thin", "vgagent")
	sh(t, "zpool", "create", "-f", "-O", "mountpoint=none", "tankagent", "/dev/vdd")
	sh(t, "zfs", "create", "tankagent/k8s")
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(agentConfig), 0o644); err != nil {
		t.Fatal(err)
	}
	first := startAgent(t, cfg)
	c := dial(t)

	hr, err := c.GetHealth(ctx(t), &agentv1.GetHealthRequest{})
	if err != nil || !hr.Healthy || !hr.TargetReady {
		t.Fatalf("health: %v %v", hr, err)
	}

	host := hostNQN(t)
	type vol struct {
		pool, name, mode string
		params           map[string]string
		uuid, nqn, dev   string
		data             []byte
	}
	vols := []*vol{
		{pool: "vgagent", name: "pvc-linear", mode: "linear", params: map[string]string{"provisioningMode": "linear"}},
		{pool: "vgagent", name: "pvc-thin", mode: "thin", params: map[string]string{"provisioningMode": "thin"}},
		{pool: "tankagent", name: "pvc-zvol", params: map[string]string{"compression": "lz4"}},
	}
	for _, v := range vols {
		t0 := time.Now()
		r, err := c.CreateVolume(ctx(t), &agentv1.CreateVolumeRequest{Pool: v.pool, Name: v.name, SizeBytes: 64 * mib, Parameters: v.params})
		benchLine("agent-createvolume", map[string]string{"vgagent": "lvm-", "tankagent": "zfs"}[v.pool]+v.mode, time.Since(t0))
		if err != nil {
			t.Fatalf("create %s/%s: %v", v.pool, v.name, err)
		}
		if r.Volume.ProvisioningMode != v.mode {
			t.Fatalf("%s: mode %q, want %q", v.name, r.Volume.ProvisioningMode, v.mode)
		}
		ex, err := c.ExportVolume(ctx(t), &agentv1.ExportVolumeRequest{Pool: v.pool, Name: v.name, AllowedHosts: []string{host}})
		if err != nil {
			t.Fatalf("export %s: %v", v.name, err)
		}
		v.uuid, v.nqn = ex.Export.Uuid, ex.Export.Nqn
		if got, _ := os.ReadFile(filepath.Join(nvmet.DefaultRoot, "subsystems", v.nqn, "attr_allow_any_host")); strings.TrimSpace(string(got)) != "0" {
			t.Fatalf("%s: allow_any_host is %q", v.name, got)
		}
	}

	// A host that is not allowed cannot connect.
	if out, err := try("nvme", "connect", "-t", "tcp", "-a", "127.0.0.1", "-s", "4420", "-n", vols[0].nqn,
		"--hostnqn", "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000ff"); err == nil {
		t.Fatalf("a host outside the ACL connected: %s", out)
	}

	for _, v := range vols {
		sh(t, "nvme", "connect", "-t", "tcp", "-a", "127.0.0.1", "-s", "4420", "-n", v.nqn, "--hostnqn", host)
		t.Cleanup(func() { try("nvme", "disconnect", "-n", v.nqn) })
		waitFor(t, "the namespace of "+v.name, 30*time.Second, func() bool { v.dev = deviceByUUID(v.uuid); return v.dev != "" })
		if got := blockSize(t, v.dev); got < 64*mib {
			t.Fatalf("%s: %s is %d bytes", v.name, v.dev, got)
		}
		v.data = pattern(t)
		writeAt(t, v.dev, 8*mib, v.data)
		if !sameBytes(readAt(t, v.dev, 8*mib, len(v.data)), v.data) {
			t.Fatalf("%s: data read back over NVMe/TCP differs", v.name)
		}
		t.Logf("%s/%s: %s connected as %s", v.pool, v.name, v.nqn, v.dev)
	}
	// The data is on the volume itself, not only in the initiator.
	lv := sh(t, "readlink", "-f", "/dev/vgagent/pvc-linear")
	if !sameBytes(readAt(t, lv, 8*mib, len(vols[0].data)), vols[0].data) {
		t.Fatal("the LV does not hold what was written over NVMe/TCP")
	}

	// Online resize: the agent grows the volume and has the target
	// revalidate; the connected host sees the new size.
	for _, v := range vols {
		if _, err := c.ExpandVolume(ctx(t), &agentv1.ExpandVolumeRequest{Pool: v.pool, Name: v.name, SizeBytes: 128 * mib}); err != nil {
			t.Fatalf("expand %s: %v", v.name, err)
		}
		waitFor(t, v.name+" to show 128 MiB on the host", 60*time.Second, func() bool { return blockSize(t, v.dev) >= 128*mib })
	}

	// Crash and restart: exports live in the kernel and are found again.
	first.kill()
	second := startAgent(t, cfg)
	c = dial(t)
	list, err := c.ListVolumes(ctx(t), &agentv1.ListVolumesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Volumes) != len(vols) {
		t.Fatalf("after restart: %d volumes", len(list.Volumes))
	}
	for i, lv := range list.Volumes {
		if lv.Export == nil || len(lv.Export.AllowedHosts) != 1 || lv.Export.AllowedHosts[0] != host {
			t.Fatalf("after restart, volume %d: export %+v", i, lv.Export)
		}
	}
	for _, v := range vols {
		if !sameBytes(readAt(t, v.dev, 8*mib, len(v.data)), v.data) {
			t.Fatalf("%s: data differs after the agent restart", v.name)
		}
	}

	// Storage node reboot (issue 20.2): the target is emptied as a reboot
	// empties it, with the hosts still connected; the agent starts on the
	// empty target and the controller's recovery re-exports the attached
	// volumes for their host. The hosts' controllers reconnect on their
	// own (reconnect delay, within ctrl-loss-tmo) and I/O resumes on the
	// same devices.
	second.kill()
	resetTarget(t)
	startAgent(t, cfg)
	c = dial(t)
	var attached []kubecontroller.Attached
	for _, v := range vols {
		attached = append(attached, kubecontroller.Attached{Volume: csiids.Volume{Store: "guest", Pool: v.pool, Name: v.name}, Hosts: []string{host}})
	}
	restored, err := kubecontroller.RestoreExports(ctx(t), c, attached)
	if err != nil || len(restored) != len(vols) {
		t.Fatalf("restore after reboot: %v %v", restored, err)
	}
	for _, v := range vols {
		waitFor(t, v.name+"'s controller to reconnect", 120*time.Second, func() bool { return controllerLive(v.nqn) })
		if !sameBytes(readAt(t, v.dev, 8*mib, len(v.data)), v.data) {
			t.Fatalf("%s: data differs after the reboot", v.name)
		}
		fresh := pattern(t)
		writeAt(t, v.dev, 16*mib, fresh)
		if !sameBytes(readAt(t, v.dev, 16*mib, len(fresh)), fresh) {
			t.Fatalf("%s: a write after the reboot does not read back", v.name)
		}
	}

	// A volume still exported cannot be lost by mistake: teardown order is
	// disconnect, unexport (delete does both), delete.
	for _, v := range vols {
		sh(t, "nvme", "disconnect", "-n", v.nqn)
		if _, err := c.DeleteVolume(ctx(t), &agentv1.DeleteVolumeRequest{Pool: v.pool, Name: v.name}); err != nil {
			t.Fatalf("delete %s: %v", v.name, err)
		}
		if _, err := os.Stat(filepath.Join(nvmet.DefaultRoot, "subsystems", v.nqn)); !os.IsNotExist(err) {
			t.Fatalf("%s: subsystem left behind (%v)", v.name, err)
		}
	}
	if out := sh(t, "lvs", "--noheadings", "-o", "lv_name", "vgagent"); strings.Contains(out, "pvc-") {
		t.Fatalf("LVs left: %s", out)
	}
	if out := sh(t, "zfs", "list", "-H", "-r", "-t", "volume", "-o", "name", "tankagent"); out != "" {
		t.Fatalf("zvols left: %s", out)
	}
	if _, err := c.ExportVolume(ctx(t), &agentv1.ExportVolumeRequest{Pool: "tankagent", Name: "pvc-zvol"}); status.Code(err) != codes.NotFound {
		t.Fatalf("export of a deleted volume: %v", err)
	}
}

// controllerLive reports whether a host controller of the subsystem nqn
// is connected ("live").
func controllerLive(nqn string) bool {
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*")
	for _, c := range ctrls {
		sub, _ := os.ReadFile(filepath.Join(c, "subsysnqn"))
		st, _ := os.ReadFile(filepath.Join(c, "state"))
		if strings.TrimSpace(string(sub)) == nqn && strings.TrimSpace(string(st)) == "live" {
			return true
		}
	}
	return false
}
