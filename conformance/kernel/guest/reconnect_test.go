//go:build kernelguest

package guest

// What an application sees when its storage node disappears (the
// reconnect defaults of docs/pillar-csi.md): two volumes connected the way
// the chart's node plugin connects them, one with the chart's default
// fastIOFailTmo and one with it off, each written by an "application"
// doing synchronous direct writes in a loop. The storage node then drops
// off the network without closing anything (its address vanishes, as in a
// power loss or a partition). The order of events is asserted, not their
// times: the first application's write fails with EIO while its
// controller is still reconnecting (ctrl-loss-tmo has not expired), the
// second's write is still blocked at that moment, and when the storage
// node comes back both controllers reconnect, the blocked write completes
// and lands on the volume, and new I/O succeeds. The times and the
// kernel's own messages are logged (RECONNECT lines) for the docs.

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pillarhq/pillar/conformance/kernel/chartpod"
	"github.com/pillarhq/pillar/impl/pillar/csinode"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// storageAddr is the storage node's address, on lo so that removing it
// makes the node unreachable without a reset: packets to it are dropped
// and the host notices only through its keep-alive.
const storageAddr = "10.99.0.1"

const blockBytes = 4096

// chartReconnect is the node plugin's reconnect settings as the chart
// renders them by default (its args parsed by the node's own flag set).
func chartReconnect(t *testing.T) csinode.Reconnect {
	b, err := os.ReadFile(filepath.Join(chartPayload, "pods.json"))
	if err != nil {
		t.Fatalf("no chart payload: %v", err)
	}
	var p chartpod.Payload
	if err := json.Unmarshal(b, &p); err != nil {
		t.Fatal(err)
	}
	c, err := chartpod.Container(&p.Node, "node")
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := csinode.ParseConfig(c.Args, io.Discard)
	if err != nil {
		t.Fatalf("the chart's node args %q: %v", c.Args, err)
	}
	return csinode.Reconnect{LossTimeoutSeconds: cfg.CtrlLossTmo, DelaySeconds: cfg.ReconnectDelay,
		FastIOFailSeconds: cfg.FastIOFailTmo, KeepAliveSeconds: cfg.KeepAliveTmo}
}

// app writes sequence-numbered blocks to a device with O_DIRECT|O_DSYNC,
// one after the other, as a database's log writer would, until a write
// fails or it is stopped. At a failure it reads its controller's state
// at once, so the state is the one the error was returned in.
type app struct {
	name, dev, ctrl string
	done            atomic.Int64 // writes completed
	inFlight        atomic.Int64 // start (UnixNano) of the write in flight, 0 between writes
	stop            atomic.Bool
	failed          chan failure // the first failure
	exited          chan struct{}
}

type failure struct {
	err   error
	at    time.Time
	state string // the controller's state read right after the error
	loss  string // its ctrl_loss_tmo at that moment
}

func startApp(t *testing.T, name, dev, ctrl string) *app {
	a := &app{name: name, dev: dev, ctrl: ctrl, failed: make(chan failure, 1), exited: make(chan struct{})}
	f, err := os.OpenFile(dev, os.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	// O_DIRECT needs an aligned buffer: a page of its own.
	buf, err := unix.Mmap(-1, 0, blockBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(a.exited)
		defer unix.Munmap(buf)
		defer f.Close()
		for seq := int64(0); !a.stop.Load(); seq++ {
			binary.LittleEndian.PutUint64(buf, uint64(seq))
			copy(buf[8:], name)
			a.inFlight.Store(time.Now().UnixNano())
			_, err := f.WriteAt(buf, blockOffset(seq))
			a.inFlight.Store(0)
			if err != nil {
				st := ctrlAttr(ctrl, "state")
				a.failed <- failure{err: err, at: time.Now(), state: st, loss: ctrlAttr(ctrl, "ctrl_loss_tmo")}
				return
			}
			a.done.Add(1)
		}
	}()
	t.Cleanup(func() { a.stop.Store(true) })
	return a
}

// blockOffset keeps the writes within the first MiB of the volume.
func blockOffset(seq int64) int64 { return (seq % 256) * blockBytes }

func ctrlAttr(ctrl, attr string) string {
	b, err := os.ReadFile(filepath.Join("/sys/class/nvme", ctrl, attr))
	if err != nil {
		return "gone (" + err.Error() + ")"
	}
	return strings.TrimSpace(string(b))
}

// ctrlOf is the fabrics controller (nvmeN) connected to nqn.
func ctrlOf(t *testing.T, nqn string) string {
	ctrls, _ := filepath.Glob("/sys/class/nvme/nvme*")
	for _, c := range ctrls {
		if sub, _ := os.ReadFile(filepath.Join(c, "subsysnqn")); strings.TrimSpace(string(sub)) == nqn {
			return filepath.Base(c)
		}
	}
	t.Fatalf("no controller of %s", nqn)
	return ""
}

func uptime(t *testing.T) float64 {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(strings.Fields(string(b))[0], 64)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func TestReconnectOnRealKernel(t *testing.T) {
	def := chartReconnect(t)
	if def.FastIOFailSeconds <= 0 || def.LossTimeoutSeconds <= def.FastIOFailSeconds {
		t.Fatalf("the chart's defaults %+v no longer fail I/O before the controller is lost; this test shows that order", def)
	}
	off := def
	off.FastIOFailSeconds = -1
	t.Logf("RECONNECT chart defaults: ctrl-loss-tmo %ds, reconnect-delay %ds, fast-io-fail-tmo %ds, keep-alive-tmo %ds",
		def.LossTimeoutSeconds, def.DelaySeconds, def.FastIOFailSeconds, def.KeepAliveSeconds)

	resetTarget(t)
	t.Cleanup(func() { resetTarget(t) })
	sh(t, "ip", "addr", "add", storageAddr+"/32", "dev", "lo")
	t.Cleanup(func() { try("ip", "addr", "del", storageAddr+"/32", "dev", "lo") })
	exp := &nvmet.Exporter{FS: nvmet.OSFS{}, Root: nvmet.DefaultRoot, Port: nvmet.Port{ID: 1, Address: storageAddr, Service: 4420, Family: "ipv4"}}
	host := hostNQN(t)
	nvme := &csinode.NVMeCLI{}

	type volume struct {
		name    string
		backing string
		r       csinode.Reconnect
		nqn     string
		dev     string
		ctrl    string
		app     *app
	}
	vols := []*volume{{name: "failfast", r: def}, {name: "waits", r: off}}
	for _, v := range vols {
		v.backing = loopDevice(t, 64*mib)
		id := nvmet.ExportID("demo", v.name)
		tg, err := exp.Export(id, v.backing)
		if err != nil {
			t.Fatal(err)
		}
		if err := exp.AllowHost(id, host); err != nil {
			t.Fatal(err)
		}
		v.nqn = tg.NQN
		dev, err := nvme.Connect(ctx(t), csinode.Target{NQN: tg.NQN, Address: storageAddr, Port: "4420", Transport: "tcp",
			UUID: tg.UUID, HostNQN: host, Reconnect: v.r})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { try("nvme", "disconnect", "-n", v.nqn) })
		v.dev, v.ctrl = dev, ctrlOf(t, tg.NQN)
		t.Logf("RECONNECT %s: %s on %s, ctrl_loss_tmo %s, fast_io_fail_tmo %s, kato %s", v.name, v.dev, v.ctrl,
			ctrlAttr(v.ctrl, "ctrl_loss_tmo"), ctrlAttr(v.ctrl, "fast_io_fail_tmo"), ctrlAttr(v.ctrl, "kato"))
	}
	for _, v := range vols {
		v.app = startApp(t, v.name, v.dev, v.ctrl)
	}
	// Both applications are writing before the storage node goes.
	waitFor(t, "both applications' first writes", time.Minute, func() bool {
		return vols[0].app.done.Load() > 10 && vols[1].app.done.Load() > 10
	})

	t0, up0 := time.Now(), uptime(t)
	sh(t, "ip", "addr", "del", storageAddr+"/32", "dev", "lo")
	doneAtLoss := vols[1].app.done.Load()
	t.Logf("RECONNECT +0.0s storage node gone (address removed) at uptime %.1f", up0)
	since := func(at time.Time) string { return fmt.Sprintf("+%.1fs", at.Sub(t0).Seconds()) }

	// The controllers notice (keep-alive) and start reconnecting.
	waitFor(t, "the controllers to leave live", 2*time.Minute, func() bool {
		return ctrlAttr(vols[0].ctrl, "state") != "live" && ctrlAttr(vols[1].ctrl, "state") != "live"
	})
	t.Logf("RECONNECT %s controllers %s, %s", since(time.Now()), ctrlAttr(vols[0].ctrl, "state"), ctrlAttr(vols[1].ctrl, "state"))

	// The fast-failing application gets EIO; its controller is still
	// reconnecting when the error is returned.
	var f failure
	select {
	case f = <-vols[0].app.failed:
	case <-time.After(time.Duration(def.LossTimeoutSeconds) * time.Second):
		t.Fatalf("no error for the application with fast_io_fail_tmo %ds within ctrl-loss-tmo", def.FastIOFailSeconds)
	}
	// Read at the same moment: the waiting application's write.
	waitsInFlight, waitsDone := vols[1].app.inFlight.Load(), vols[1].app.done.Load()
	waitsState := ctrlAttr(vols[1].ctrl, "state")
	t.Logf("RECONNECT %s %s: write failed: %v (controller %s, ctrl_loss_tmo %s)", since(f.at), vols[0].name, f.err, f.state, f.loss)
	t.Logf("RECONNECT %s %s: write in flight since %s, controller %s", since(time.Now()), vols[1].name,
		since(time.Unix(0, waitsInFlight)), waitsState)
	if !errors.Is(f.err, syscall.EIO) {
		t.Fatalf("the application saw %v, not EIO", f.err)
	}
	if f.state != "connecting" && f.state != "resetting" {
		t.Fatalf("the error came with the controller %q, not while it was still reconnecting", f.state)
	}
	select {
	case g := <-vols[1].app.failed:
		t.Fatalf("the application with fast_io_fail_tmo off failed too: %v (controller %s)", g.err, g.state)
	default:
	}
	if waitsInFlight == 0 || waitsDone > doneAtLoss+1 {
		t.Fatalf("the application with fast_io_fail_tmo off is not blocked: %d writes done at the loss, %d now, in flight: %v", doneAtLoss, waitsDone, waitsInFlight != 0)
	}
	if waitsState != "connecting" && waitsState != "resetting" {
		t.Fatalf("the waiting application's controller is %q", waitsState)
	}

	// The storage node comes back within ctrl-loss-tmo: both controllers
	// reconnect, the blocked write completes, new I/O succeeds.
	restored := time.Now()
	sh(t, "ip", "addr", "add", storageAddr+"/32", "dev", "lo")
	t.Logf("RECONNECT %s storage node back", since(restored))
	waitFor(t, "both controllers live again", 2*time.Duration(def.DelaySeconds+def.KeepAliveSeconds)*time.Second+time.Minute, func() bool {
		return ctrlAttr(vols[0].ctrl, "state") == "live" && ctrlAttr(vols[1].ctrl, "state") == "live"
	})
	t.Logf("RECONNECT %s both controllers live", since(time.Now()))
	waitFor(t, "the blocked write to complete", time.Minute, func() bool { return vols[1].app.done.Load() > waitsDone })
	t.Logf("RECONNECT %s %s: the blocked write completed", since(time.Now()), vols[1].name)
	vols[1].app.stop.Store(true)
	<-vols[1].app.exited
	select {
	case g := <-vols[1].app.failed:
		t.Fatalf("the waiting application failed after the reconnect: %v", g.err)
	default:
	}
	// The write that was blocked is on the volume (read on the storage
	// side, below the target).
	// It may have been overwritten since by a later write to the same
	// block, never by an earlier one.
	blocked := waitsDone
	got := readAt(t, vols[1].backing, blockOffset(blocked), blockBytes)
	if seq := int64(binary.LittleEndian.Uint64(got)); seq < blocked || seq%256 != blocked%256 || string(got[8:8+len(vols[1].name)]) != vols[1].name {
		t.Fatalf("the block of write %d holds write %d of %q", blocked, seq, got[8:8+len(vols[1].name)])
	}
	// The application that got EIO writes again, and it lands.
	again := pattern(t)[:blockBytes]
	buf, err := unix.Mmap(-1, 0, blockBytes, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(buf)
	copy(buf, again)
	fd, err := os.OpenFile(vols[0].dev, os.O_WRONLY|unix.O_DIRECT|unix.O_DSYNC, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = fd.WriteAt(buf, 2*mib)
	fd.Close()
	if err != nil {
		t.Fatalf("a new write after the reconnect: %v", err)
	}
	if !sameBytes(readAt(t, vols[0].backing, 2*mib, blockBytes), again) {
		t.Fatal("the new write after the reconnect is not on the volume")
	}

	// The kernel's account, from the loss on.
	out, _ := try("dmesg")
	for _, l := range strings.Split(out, "\n") {
		var ts float64
		if _, err := fmt.Sscanf(strings.TrimLeft(l, "[ "), "%f]", &ts); err != nil || ts < up0-1 {
			continue
		}
		if strings.Contains(l, "nvme") || strings.Contains(l, "I/O") {
			t.Logf("RECONNECT dmesg +%.1fs %s", ts-up0, l)
		}
	}
}
