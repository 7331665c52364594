//go:build kernelguest

package guest

// Fencing and the single-host export on the real kernel: a host connected
// to a volume stops reaching it when the agent denies it (its writes fail
// and never land on the volume), and two exports of one volume to two
// hosts racing on the agent cannot both succeed.

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
)

func TestFenceOnRealKernel(t *testing.T) {
	t.Cleanup(func() { dumpAgentLog(t) })
	resetTarget(t)
	vg := lvmGroup(t)
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte(fmt.Sprintf("backends:\n  - lvm:\n      volumeGroup: %s\n", vg)), 0o644); err != nil {
		t.Fatal(err)
	}
	startAgent(t, cfg)
	c := dial(t)
	host := hostNQN(t)
	other := "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000000fe"

	if _, err := c.CreateVolume(ctx(t), &agentv1.CreateVolumeRequest{Pool: vg, Name: "pvc-fence", SizeBytes: 64 * mib}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.DeleteVolume(ctx(t), &agentv1.DeleteVolumeRequest{Pool: vg, Name: "pvc-fence"}) })

	// Two single-host exports racing for two hosts: exactly one wins, on
	// every round.
	for round := range 10 {
		var wg sync.WaitGroup
		errs := make([]error, 2)
		start := make(chan struct{})
		for i, h := range []string{host, other} {
			wg.Go(func() {
				<-start
				_, errs[i] = c.ExportVolume(ctx(t), &agentv1.ExportVolumeRequest{Pool: vg, Name: "pvc-fence", AllowedHosts: []string{h}, SingleHost: true})
			})
		}
		close(start)
		wg.Wait()
		won := 0
		for _, err := range errs {
			if err == nil {
				won++
			} else if status.Code(err) != codes.FailedPrecondition {
				t.Fatalf("round %d: %v", round, err)
			}
		}
		if won != 1 {
			t.Fatalf("round %d: %d single-host exports succeeded (%v)", round, won, errs)
		}
		for _, h := range []string{host, other} {
			if _, err := c.DenyHost(ctx(t), &agentv1.DenyHostRequest{Pool: vg, Name: "pvc-fence", HostNqn: h}); err != nil {
				t.Fatal(err)
			}
		}
	}

	ex, err := c.ExportVolume(ctx(t), &agentv1.ExportVolumeRequest{Pool: vg, Name: "pvc-fence", AllowedHosts: []string{host}, SingleHost: true})
	if err != nil {
		t.Fatal(err)
	}
	nqn := ex.Export.Nqn
	// Short reconnect bounds, so the fenced host's I/O fails within
	// seconds instead of queueing for the defaults' minutes.
	sh(t, "nvme", "connect", "-t", "tcp", "-a", "127.0.0.1", "-s", "4420", "-n", nqn, "--hostnqn", host,
		"--ctrl-loss-tmo", "4", "--reconnect-delay", "1")
	t.Cleanup(func() { try("nvme", "disconnect", "-n", nqn) })
	var dev string
	waitFor(t, "the namespace", 30*time.Second, func() bool { dev = deviceByUUID(ex.Export.Uuid); return dev != "" })
	before := pattern(t)
	writeAt(t, dev, 8*mib, before)

	if _, err := c.DenyHost(ctx(t), &agentv1.DenyHostRequest{Pool: vg, Name: "pvc-fence", HostNqn: host}); err != nil {
		t.Fatal(err)
	}
	// The host's connection is gone: a direct write fails (once the
	// controller loss timeout ends the reconnect attempts the target
	// refuses) instead of reaching the volume.
	after := pattern(t)
	f, err := os.OpenFile(dev, os.O_WRONLY|os.O_SYNC, 0)
	if err == nil {
		_, err = f.WriteAt(after, 16*mib)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		t.Fatal("a write of the denied host succeeded")
	}
	t.Logf("the denied host's write failed: %v", err)
	lv := sh(t, "readlink", "-f", "/dev/"+vg+"/pvc-fence")
	if sameBytes(readAt(t, lv, 16*mib, len(after)), after) {
		t.Fatal("the denied host's write reached the volume")
	}
	if !sameBytes(readAt(t, lv, 8*mib, len(before)), before) {
		t.Fatal("the write made before the deny is not on the volume")
	}
	if n := controllersOf(nqn); n != 0 && controllerLive(nqn) {
		t.Fatalf("the denied host still has a live controller (%d controllers)", n)
	}
}
