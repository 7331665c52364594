package csinode

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// nvme connect carries the host's identity and the volume's reconnect
// settings.
func TestConnectArgs(t *testing.T) {
	t.Parallel()
	sys := t.TempDir()
	var got []string
	n := &NVMeCLI{SysRoot: sys, Exec: func(_ context.Context, name string, args ...string) (string, error) {
		got = append([]string{name}, args...)
		// The controller and namespace appear as the kernel would show them.
		for _, d := range []string{"block/nvme0n1", "class/nvme-fabrics/ctl/nvme0", "class/nvme/nvme0"} {
			if err := os.MkdirAll(filepath.Join(sys, d), 0o755); err != nil {
				return "", err
			}
		}
		if err := os.WriteFile(filepath.Join(sys, "class/nvme-fabrics/ctl/nvme0/subsysnqn"), []byte("nqn.x:vol\n"), 0o644); err != nil {
			return "", err
		}
		if err := os.WriteFile(filepath.Join(sys, "class/nvme/nvme0/fast_io_fail_tmo"), []byte("off\n"), 0o644); err != nil {
			return "", err
		}
		return "", os.WriteFile(filepath.Join(sys, "block/nvme0n1/uuid"), []byte("u-1\n"), 0o644)
	}}
	dev, err := n.Connect(context.Background(), Target{NQN: "nqn.x:vol", Address: "10.0.0.1", Port: "4420", Transport: "tcp", UUID: "u-1",
		HostNQN: "nqn.host", HostID: "id-1", Reconnect: Reconnect{LossTimeoutSeconds: -1, DelaySeconds: 5, FastIOFailSeconds: 120, KeepAliveSeconds: 5}})
	if err != nil || dev != "/dev/nvme0n1" {
		t.Fatalf("Connect = %q, %v", dev, err)
	}
	// Only options nvme-cli 2.3 (Debian 12) knows; fast_io_fail_tmo is
	// written to the controller's attribute instead.
	want := "nvme connect -t tcp -a 10.0.0.1 -s 4420 -n nqn.x:vol --hostnqn nqn.host --hostid id-1 --ctrl-loss-tmo -1 --reconnect-delay 5 --keep-alive-tmo 5"
	if strings.Join(got, " ") != want {
		t.Fatalf("ran %q\nwant %q", strings.Join(got, " "), want)
	}
	if b, err := os.ReadFile(filepath.Join(sys, "class/nvme/nvme0/fast_io_fail_tmo")); err != nil || string(b) != "120" {
		t.Fatalf("fast_io_fail_tmo = %q, %v", b, err)
	}
}

func TestParseReconnect(t *testing.T) {
	t.Parallel()
	def := Reconnect{LossTimeoutSeconds: 1800, DelaySeconds: 10}
	r, err := ParseReconnect(map[string]string{CtxCtrlLossTmo: "-1"}, def)
	if err != nil || r != (Reconnect{LossTimeoutSeconds: -1, DelaySeconds: 10}) {
		t.Fatalf("ParseReconnect = %+v, %v", r, err)
	}
	def = Reconnect{LossTimeoutSeconds: 1800, DelaySeconds: 10, FastIOFailSeconds: 120, KeepAliveSeconds: 5}
	r, err = ParseReconnect(map[string]string{CtxFastIOFailTmo: "-1", CtxKeepAliveTmo: "15"}, def)
	if err != nil || r != (Reconnect{LossTimeoutSeconds: 1800, DelaySeconds: 10, FastIOFailSeconds: -1, KeepAliveSeconds: 15}) {
		t.Fatalf("ParseReconnect = %+v, %v", r, err)
	}
	for _, bad := range []map[string]string{{CtxCtrlLossTmo: "-2"}, {CtxReconnectDelay: "0"}, {CtxReconnectDelay: "soon"},
		{CtxFastIOFailTmo: "-2"}, {CtxKeepAliveTmo: "0"}, {CtxKeepAliveTmo: "5s"}} {
		if _, err := ParseReconnect(bad, def); err == nil {
			t.Errorf("ParseReconnect(%v) accepted", bad)
		}
	}
}

// A node without /etc/nvme files gets its own identity, kept across
// restarts; two nodes get two.
func TestHostIdentity(t *testing.T) {
	t.Parallel()
	a, b := t.TempDir(), t.TempDir()
	idA, err := HostIdentity(filepath.Join(a, "hostnqn"), filepath.Join(a, "hostid"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(idA.NQN, "nqn.2014-08.org.nvmexpress:uuid:") || idA.NQN != "nqn.2014-08.org.nvmexpress:uuid:"+idA.ID {
		t.Fatalf("identity %+v: want a uuid NQN whose uuid is the host ID", idA)
	}
	again, err := HostIdentity(filepath.Join(a, "hostnqn"), filepath.Join(a, "hostid"))
	if err != nil || again != idA {
		t.Fatalf("second start: %+v, %v; want %+v", again, err, idA)
	}
	idB, err := HostIdentity(filepath.Join(b, "hostnqn"), filepath.Join(b, "hostid"))
	if err != nil || idB.NQN == idA.NQN || idB.ID == idA.ID {
		t.Fatalf("second node %+v, %v: want an identity of its own", idB, err)
	}
	// The host's existing files are used as they are.
	c := t.TempDir()
	os.WriteFile(filepath.Join(c, "hostnqn"), []byte("nqn.2014-08.org.example:host-c\n"), 0o644)
	idC, err := HostIdentity(filepath.Join(c, "hostnqn"), filepath.Join(c, "hostid"))
	if err != nil || idC.NQN != "nqn.2014-08.org.example:host-c" || !uuidRE.MatchString(idC.ID) {
		t.Fatalf("existing NQN: %+v, %v", idC, err)
	}
	os.WriteFile(filepath.Join(c, "hostnqn"), []byte("garbage\n"), 0o644)
	if _, err := HostIdentity(filepath.Join(c, "hostnqn"), filepath.Join(c, "hostid")); err == nil {
		t.Fatal("a hostnqn file without an NQN was accepted")
	}
	// The NQN nvme-cli derives from a zero DMI UUID is shared by every
	// such machine: refused, and the file left for the operator.
	os.WriteFile(filepath.Join(c, "hostnqn"), []byte(zeroNQN+"\n"), 0o644)
	if _, err := HostIdentity(filepath.Join(c, "hostnqn"), filepath.Join(c, "hostid")); err == nil || !strings.Contains(err.Error(), "all-zero") {
		t.Fatalf("the all-zero NQN: %v; want refused", err)
	}
	if b, _ := os.ReadFile(filepath.Join(c, "hostnqn")); strings.TrimSpace(string(b)) != zeroNQN {
		t.Fatalf("hostnqn rewritten to %q", b)
	}
}
