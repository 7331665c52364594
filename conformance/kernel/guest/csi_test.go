//go:build kernelguest

package guest

// The real pillar-controller (standalone) and pillar-node (nvme-cli
// connector) on the real kernel, over the real agent: a volume is created,
// published to this host, staged through `nvme connect` (found by its
// namespace uuid), formatted (ext4, xfs) or used raw, published into a
// "pod" directory, written, expanded online (filesystem grown), and torn
// down so no mount, controller or volume is left.

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/pillarhq/pillar/conformance/harness/runner"
)

func startDaemon(t *testing.T, name string, args ...string) {
	t.Helper()
	logf, err := os.Create("/tmp/" + filepath.Base(name) + ".log")
	if err != nil {
		t.Fatal(err)
	}
	p, err := guestRunner.Start(name, args, runner.Options{Log: logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("%s log:\n%s", name, b)
		}
	})
}

func csiConn(t *testing.T, sock string) *grpc.ClientConn {
	waitFor(t, sock, 30*time.Second, func() bool { _, err := os.Stat(sock); return err == nil })
	c, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mounted(path string) bool {
	b, _ := os.ReadFile("/proc/self/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == path {
			return true
		}
	}
	return false
}

func fsSize(t *testing.T, path string) int64 {
	var st unix.Statfs_t
	if err := unix.Statfs(path, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Blocks) * int64(st.Bsize)
}

func TestCSIOnRealKernel(t *testing.T) {
	t.Cleanup(func() { dumpAgentLog(t) })
	resetTarget(t)
	vgDev := loopDevice(t, 2<<30)
	sh(t, "pvcreate", "-q", "-y", vgDev)
	sh(t, "vgcreate", "-q", "vgcsi", vgDev)
	sh(t, "lvcreate", "-q", "-y", "--type", "thin-pool", "-L", "1g", "-n", "thin", "vgcsi")
	t.Cleanup(func() { try("vgremove", "-q", "-f", "vgcsi") })
	dir := t.TempDir()
	cfg := filepath.Join(dir, "agent.yaml")
	os.WriteFile(cfg, []byte("backends:\n  - lvm: {volumeGroup: vgcsi, thinPool: thin}\n"), 0o644)
	storesFile := filepath.Join(dir, "stores.yaml")
	os.WriteFile(storesFile, []byte("stores:\n  - name: fast\n    agent: "+agentAddr+"\n    backend: {lvm: {volumeGroup: vgcsi, thinPool: thin, provisioningMode: thin}}\n"), 0o644)
	startAgent(t, cfg)
	startDaemon(t, "/payload/pillar-controller", "--standalone-stores", storesFile, "--csi-endpoint", "unix://"+dir+"/controller.sock")
	startDaemon(t, "/payload/pillar-node", "--node-id", "guest", "--csi-endpoint", "unix://"+dir+"/node.sock", "--connector", "nvme")
	ctrl := csi.NewControllerClient(csiConn(t, dir+"/controller.sock"))
	node := csi.NewNodeClient(csiConn(t, dir+"/node.sock"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	info, err := node.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
	if err != nil || !strings.HasSuffix(info.NodeId, "/"+hostNQN(t)) {
		t.Fatalf("node info %v %v", info, err)
	}

	for _, tc := range []struct {
		name string
		cap  *csi.VolumeCapability
	}{
		{"ext4", &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}}}},
		{"xfs", &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "xfs"}}}},
		{"block", &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Block{Block: &csi.VolumeCapability_BlockVolume{}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.cap.AccessMode = &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}
			caps := []*csi.VolumeCapability{tc.cap}
			t0 := time.Now()
			cv, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-" + tc.name, VolumeCapabilities: caps,
				CapacityRange: &csi.CapacityRange{RequiredBytes: 320 << 20}, Parameters: map[string]string{"store": "fast"}})
			benchLine("csi-createvolume", "lvm-thin", time.Since(t0))
			if err != nil {
				t.Fatal(err)
			}
			id := cv.Volume.VolumeId
			pub, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: info.NodeId, VolumeCapability: tc.cap})
			if err != nil {
				t.Fatal(err)
			}
			staging, target := filepath.Join(dir, tc.name, "staging"), filepath.Join(dir, tc.name, "pod", "vol")
			os.MkdirAll(staging, 0o750)
			t0 = time.Now()
			if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext, StagingTargetPath: staging, VolumeCapability: tc.cap}); err != nil {
				t.Fatal(err)
			}
			benchLine("csi-nodestage", "nvme-tcp-"+tc.name, time.Since(t0))
			dev := deviceByUUID(pub.PublishContext["uuid"])
			if !strings.HasPrefix(dev, "/dev/nvme") {
				t.Fatalf("no NVMe device for uuid %s after staging", pub.PublishContext["uuid"])
			}
			if _, err := node.NodePublishVolume(ctx, &csi.NodePublishVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext, StagingTargetPath: staging, TargetPath: target, VolumeCapability: tc.cap}); err != nil {
				t.Fatal(err)
			}
			if !mounted(target) {
				t.Fatalf("%s is not mounted", target)
			}
			data := pattern(t)
			var before int64
			if tc.cap.GetBlock() != nil {
				writeAt(t, target, 4<<20, data)
				if !sameBytes(readAt(t, dev, 4<<20, len(data)), data) {
					t.Fatal("raw block data differs on the device")
				}
			} else {
				if fs := sh(t, "findmnt", "-n", "-o", "FSTYPE", staging); fs != tc.name {
					t.Fatalf("staging filesystem is %q", fs)
				}
				if err := os.WriteFile(filepath.Join(target, "data"), data, 0o644); err != nil {
					t.Fatal(err)
				}
				before = fsSize(t, target)
			}

			ex, err := ctrl.ControllerExpandVolume(ctx, &csi.ControllerExpandVolumeRequest{VolumeId: id, CapacityRange: &csi.CapacityRange{RequiredBytes: 640 << 20}, VolumeCapability: tc.cap})
			if err != nil {
				t.Fatal(err)
			}
			if ex.NodeExpansionRequired {
				if _, err := node.NodeExpandVolume(ctx, &csi.NodeExpandVolumeRequest{VolumeId: id, VolumePath: target, StagingTargetPath: staging, VolumeCapability: tc.cap, CapacityRange: &csi.CapacityRange{RequiredBytes: 640 << 20}}); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, "the device to grow", 60*time.Second, func() bool { return blockSize(t, dev) >= 640<<20 })
			if tc.cap.GetBlock() == nil {
				if after := fsSize(t, target); after < before+200<<20 {
					t.Fatalf("filesystem did not grow: %d -> %d", before, after)
				}
				got, err := os.ReadFile(filepath.Join(target, "data"))
				if err != nil || !sameBytes(got, data) {
					t.Fatalf("data after expand: %v", err)
				}
				st, err := node.NodeGetVolumeStats(ctx, &csi.NodeGetVolumeStatsRequest{VolumeId: id, VolumePath: target})
				if err != nil || st.Usage[0].Total < 500<<20 {
					t.Fatalf("stats %v %v", st, err)
				}
			}

			if _, err := node.NodeUnpublishVolume(ctx, &csi.NodeUnpublishVolumeRequest{VolumeId: id, TargetPath: target}); err != nil {
				t.Fatal(err)
			}
			if _, err := node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging}); err != nil {
				t.Fatal(err)
			}
			if mounted(target) || mounted(staging) {
				t.Fatal("a mount is left after unstage")
			}
			if d := deviceByUUID(pub.PublishContext["uuid"]); d != "" {
				t.Fatalf("%s still connected after unstage", d)
			}
			if _, err := ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: info.NodeId}); err != nil {
				t.Fatal(err)
			}
			if _, err := ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id}); err != nil {
				t.Fatal(err)
			}
		})
	}
	// A second node with an identity of its own (written to its empty
	// host directory at first start) cannot connect to a volume exported
	// to this one; a target nothing listens on is refused (S-AG-11: an
	// agent off the host network is unreachable at staging); a volume's
	// reconnect settings reach the kernel's controller.
	t.Run("node B refused, connection refused, reconnect settings", func(t *testing.T) {
		etcB := filepath.Join(dir, "node-b-etc-nvme")
		startDaemon(t, "/payload/pillar-node", "--node-id", "guest-b", "--csi-endpoint", "unix://"+dir+"/node-b.sock", "--connector", "nvme",
			"--host-nqn-file", etcB+"/hostnqn", "--host-id-file", etcB+"/hostid")
		nodeB := csi.NewNodeClient(csiConn(t, dir+"/node-b.sock"))
		infoB, err := nodeB.NodeGetInfo(ctx, &csi.NodeGetInfoRequest{})
		if err != nil || infoB.NodeId == info.NodeId || strings.HasSuffix(infoB.NodeId, "/"+hostNQN(t)) {
			t.Fatalf("node B info %v %v: want its own host NQN", infoB, err)
		}
		cap := &csi.VolumeCapability{AccessType: &csi.VolumeCapability_Mount{Mount: &csi.VolumeCapability_MountVolume{FsType: "ext4"}},
			AccessMode: &csi.VolumeCapability_AccessMode{Mode: csi.VolumeCapability_AccessMode_SINGLE_NODE_WRITER}}
		cv, err := ctrl.CreateVolume(ctx, &csi.CreateVolumeRequest{Name: "pvc-two-nodes", VolumeCapabilities: []*csi.VolumeCapability{cap},
			CapacityRange: &csi.CapacityRange{RequiredBytes: 64 << 20}, Parameters: map[string]string{"store": "fast", "ctrlLossTmo": "-1", "reconnectDelay": "3"}})
		if err != nil {
			t.Fatal(err)
		}
		id := cv.Volume.VolumeId
		defer ctrl.DeleteVolume(ctx, &csi.DeleteVolumeRequest{VolumeId: id})
		pub, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: info.NodeId, VolumeCapability: cap})
		if err != nil {
			t.Fatal(err)
		}
		defer ctrl.ControllerUnpublishVolume(ctx, &csi.ControllerUnpublishVolumeRequest{VolumeId: id, NodeId: info.NodeId})
		if _, err := ctrl.ControllerPublishVolume(ctx, &csi.ControllerPublishVolumeRequest{VolumeId: id, NodeId: infoB.NodeId, VolumeCapability: cap}); status.Code(err) != codes.FailedPrecondition {
			t.Fatalf("publish to node B while node A has it: %v, want FailedPrecondition", err)
		}
		_, err = nodeB.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext,
			StagingTargetPath: filepath.Join(dir, "b-staging"), VolumeCapability: cap, VolumeContext: cv.Volume.VolumeContext})
		if err == nil {
			t.Fatal("node B staged a volume exported to node A")
		}
		if d := deviceByUUID(pub.PublishContext["uuid"]); d != "" {
			t.Fatalf("node B's attempt left %s connected", d)
		}
		refused := map[string]string{}
		for k, v := range pub.PublishContext {
			refused[k] = v
		}
		refused["port"] = "4499"
		_, err = node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: refused,
			StagingTargetPath: filepath.Join(dir, "refused-staging"), VolumeCapability: cap, VolumeContext: cv.Volume.VolumeContext})
		if err == nil || !strings.Contains(strings.ToLower(err.Error()), "refused") {
			t.Fatalf("staging against a port nothing listens on: %v, want connection refused", err)
		}
		staging := filepath.Join(dir, "a-staging")
		if _, err := node.NodeStageVolume(ctx, &csi.NodeStageVolumeRequest{VolumeId: id, PublishContext: pub.PublishContext, StagingTargetPath: staging,
			VolumeCapability: cap, VolumeContext: cv.Volume.VolumeContext}); err != nil {
			t.Fatal(err)
		}
		defer node.NodeUnstageVolume(ctx, &csi.NodeUnstageVolumeRequest{VolumeId: id, StagingTargetPath: staging})
		// The staged volume's controller carries the connector's
		// reconnect settings; with none for its subsystem the check
		// would pass on nothing, so that fails too.
		ctls, _ := filepath.Glob("/sys/class/nvme-fabrics/ctl/nvme*")
		var matched []string
		for _, c := range ctls {
			if nqn, _ := os.ReadFile(c + "/subsysnqn"); strings.TrimSpace(string(nqn)) != pub.PublishContext["nqn"] {
				continue
			}
			matched = append(matched, c)
			if v, err := os.ReadFile(c + "/ctrl_loss_tmo"); err != nil || strings.TrimSpace(string(v)) != "off" {
				t.Errorf("ctrl_loss_tmo of %s = %q (%v), want off (-1)", c, v, err)
			}
			if v, err := os.ReadFile(c + "/reconnect_delay"); err != nil || strings.TrimSpace(string(v)) != "3" {
				t.Errorf("reconnect_delay of %s = %q (%v), want 3", c, v, err)
			}
		}
		if len(matched) == 0 {
			t.Fatalf("no NVMe controller of subsystem %s after staging (controllers: %v)", pub.PublishContext["nqn"], ctls)
		}
	})
	if left, _ := filepath.Glob("/sys/class/nvme-fabrics/ctl/nvme*"); len(left) > 0 {
		t.Fatalf("NVMe controllers left: %v", left)
	}
	if out := sh(t, "lvs", "--noheadings", "-o", "lv_name", "vgcsi"); strings.Contains(out, "pvc-") {
		t.Fatalf("LVs left: %s", out)
	}
}
