// Package nvmettest is the exporter's behavioural suite, run against the
// configfs fake (conformance/backends) and, under qemu, the real kernel
// target: the same checks, so the fake cannot drift from the kernel.
package nvmettest

import (
	"errors"
	"io/fs"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// Target is one configfs tree to test on.
type Target struct {
	FS   nvmet.FS
	Root string
	// Device returns a block device path the target accepts (a fresh one
	// per call).
	Device func(t *testing.T) string
}

// Opener gives a fresh, empty tree.
type Opener func(t *testing.T) Target

func exporter(tg Target) *nvmet.Exporter {
	return &nvmet.Exporter{FS: tg.FS, Root: tg.Root, Port: nvmet.Port{ID: 1, Address: "127.0.0.1", Service: 4420, Family: "ipv4"}}
}

func read(t *testing.T, tg Target, parts ...string) string {
	t.Helper()
	v, err := tg.FS.ReadFile(filepath.Join(append([]string{tg.Root}, parts...)...))
	if err != nil {
		t.Fatalf("read %v: %v", parts, err)
	}
	return v
}

// Exercise runs every check.
func Exercise(t *testing.T, open Opener) {
	t.Run("ExportLayout", func(t *testing.T) { testExportLayout(t, open(t)) })
	t.Run("Hosts", func(t *testing.T) { testHosts(t, open(t)) })
	t.Run("UnexportAndRestart", func(t *testing.T) { testUnexportAndRestart(t, open(t)) })
	t.Run("KernelRules", func(t *testing.T) { testKernelRules(t, open(t)) })
	t.Run("Revalidate", func(t *testing.T) { testRevalidate(t, open(t)) })
	t.Run("DenyFences", func(t *testing.T) { testDenyFences(t, open(t)) })
}

// Denying a host unlinks the subsystem from its port (which deletes the
// connected controllers on a real kernel) and links it back for the hosts
// still allowed; a deny cut short between its steps is completed by the
// retry, and denying a host that is not allowed restores a missing link.
func testDenyFences(t *testing.T, tg Target) {
	e := exporter(tg)
	if _, err := e.Export("pvc-f", tg.Device(t)); err != nil {
		t.Fatal(err)
	}
	a := "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-2222-3333-4444-555555555555"
	b := "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-2222-3333-4444-555555555555"
	for _, h := range []string{a, b} {
		if err := e.AllowHost("pvc-f", h); err != nil {
			t.Fatal(err)
		}
	}
	portLink := filepath.Join(tg.Root, "ports", "1", "subsystems", nvmet.NQN("pvc-f"))
	if err := e.DenyHost("pvc-f", a); err != nil {
		t.Fatal(err)
	}
	if !tg.FS.Exists(portLink) {
		t.Fatal("the subsystem is not linked to its port after the deny")
	}
	if got, _ := e.Get("pvc-f"); len(got.Hosts) != 1 || got.Hosts[0] != b {
		t.Fatalf("hosts after denying %s: %v", a, got.Hosts)
	}
	// Cut short after the unlink: the retry removes the host and links back.
	if err := tg.FS.Remove(portLink); err != nil {
		t.Fatal(err)
	}
	if err := e.DenyHost("pvc-f", b); err != nil {
		t.Fatal(err)
	}
	if got, _ := e.Get("pvc-f"); len(got.Hosts) != 0 || !tg.FS.Exists(portLink) {
		t.Fatalf("after the retried deny: hosts %v, linked %v", got.Hosts, tg.FS.Exists(portLink))
	}
	// Cut short after the host was removed: the retry links back.
	if err := tg.FS.Remove(portLink); err != nil {
		t.Fatal(err)
	}
	if err := e.DenyHost("pvc-f", b); err != nil || !tg.FS.Exists(portLink) {
		t.Fatalf("deny of a host no longer allowed: %v, linked %v", err, tg.FS.Exists(portLink))
	}
	if err := e.DenyHost("pvc-none", a); err != nil {
		t.Fatalf("deny on a volume that is not exported: %v", err)
	}
}

// After a volume grows the target re-reads its size; that works only on
// an enabled namespace, and revalidating a volume that is not exported
// changes nothing.
func testRevalidate(t *testing.T, tg Target) {
	e := exporter(tg)
	if err := e.Revalidate("pvc-none"); err != nil {
		t.Fatalf("revalidate of a volume that is not exported: %v", err)
	}
	if _, err := e.Get("pvc-none"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("get of a volume that is not exported: %v", err)
	}
	dev := tg.Device(t)
	if _, err := e.Export("pvc-grow", dev); err != nil {
		t.Fatal(err)
	}
	if err := e.Revalidate("pvc-grow"); err != nil {
		t.Fatalf("revalidate: %v", err)
	}
	got, err := e.Get("pvc-grow")
	if err != nil || got.Device != dev {
		t.Fatalf("get: %+v, %v", got, err)
	}
	ns := filepath.Join(tg.Root, "subsystems", nvmet.NQN("pvc-grow"), "namespaces", "1")
	if err := tg.FS.WriteFile(filepath.Join(ns, "enable"), "0"); err != nil {
		t.Fatal(err)
	}
	if err := tg.FS.WriteFile(filepath.Join(ns, "revalidate_size"), "1"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("revalidate of a disabled namespace: %v, want EINVAL", err)
	}
	if err := e.Unexport("pvc-grow"); err != nil {
		t.Fatal(err)
	}
}

// S-AG-10: a volume is exported over NVMe/TCP as its own subsystem with a
// stable identity, reachable through the TCP port, never to any host.
func testExportLayout(t *testing.T, tg Target) {
	e := exporter(tg)
	dev := tg.Device(t)
	tgt, err := e.Export("pvc-1", dev)
	if err != nil {
		t.Fatal(err)
	}
	uuid, nguid := nvmet.IDs("pvc-1")
	if tgt.NQN != nvmet.NQN("pvc-1") || tgt.Device != dev || tgt.UUID != uuid || tgt.NGUID != nguid || tgt.Address != "127.0.0.1" || tgt.Service != 4420 {
		t.Fatalf("target %+v", tgt)
	}
	nqn := nvmet.NQN("pvc-1")
	if read(t, tg, "subsystems", nqn, "attr_allow_any_host") != "0" {
		t.Fatal("allow_any_host is on")
	}
	if read(t, tg, "subsystems", nqn, "namespaces", "1", "enable") != "1" {
		t.Fatal("namespace not enabled")
	}
	for k, v := range map[string]string{"addr_trtype": "tcp", "addr_adrfam": "ipv4", "addr_traddr": "127.0.0.1", "addr_trsvcid": "4420"} {
		if got := read(t, tg, "ports", "1", k); got != v {
			t.Errorf("port %s = %q, want %q", k, got, v)
		}
	}
	if !tg.FS.Exists(filepath.Join(tg.Root, "ports", "1", "subsystems", nqn)) {
		t.Fatal("subsystem not linked to the port")
	}
	// Idempotent; the identity is stable.
	again, err := e.Export("pvc-1", dev)
	if err != nil || again.UUID != uuid {
		t.Fatalf("re-export: %+v %v", again, err)
	}
	if _, err := e.Export("pvc-1", tg.Device(t)); err == nil {
		t.Fatal("re-export from another device accepted")
	}
	if u2, _ := nvmet.IDs("pvc-2"); u2 == uuid {
		t.Fatal("two volumes share a UUID")
	}
}

func testHosts(t *testing.T, tg Target) {
	e := exporter(tg)
	if _, err := e.Export("pvc-h", tg.Device(t)); err != nil {
		t.Fatal(err)
	}
	host := "nqn.2014-08.org.nvmexpress:uuid:11111111-2222-3333-4444-555555555555"
	for range 2 {
		if err := e.AllowHost("pvc-h", host); err != nil {
			t.Fatal(err)
		}
	}
	ts, _ := e.List()
	if len(ts) != 1 || len(ts[0].Hosts) != 1 || ts[0].Hosts[0] != host {
		t.Fatalf("hosts %+v", ts)
	}
	for range 2 {
		if err := e.DenyHost("pvc-h", host); err != nil {
			t.Fatal(err)
		}
	}
	if ts, _ := e.List(); len(ts[0].Hosts) != 0 {
		t.Fatalf("host still allowed: %+v", ts)
	}
	if err := e.AllowHost("pvc-missing", host); err == nil {
		t.Fatal("host allowed on a volume that is not exported")
	}
}

func testUnexportAndRestart(t *testing.T, tg Target) {
	e := exporter(tg)
	dev := tg.Device(t)
	if _, err := e.Export("pvc-a", dev); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Export("pvc-b", tg.Device(t)); err != nil {
		t.Fatal(err)
	}
	host := "nqn.2014-08.org.nvmexpress:uuid:aaaaaaaa-2222-3333-4444-555555555555"
	if err := e.AllowHost("pvc-a", host); err != nil {
		t.Fatal(err)
	}
	// A restarted agent rebuilds its view from configfs.
	fresh := exporter(tg)
	ts, err := fresh.List()
	if err != nil || len(ts) != 2 || ts[0].VolumeID != "pvc-a" || ts[0].Device != dev || len(ts[0].Hosts) != 1 {
		t.Fatalf("after restart: %+v %v", ts, err)
	}
	for range 2 {
		if err := fresh.Unexport("pvc-a"); err != nil {
			t.Fatal(err)
		}
	}
	if tg.FS.Exists(filepath.Join(tg.Root, "subsystems", nvmet.NQN("pvc-a"))) {
		t.Fatal("subsystem left behind")
	}
	if ts, _ := fresh.List(); len(ts) != 1 || ts[0].VolumeID != "pvc-b" {
		t.Fatalf("remaining %+v", ts)
	}
}

// The target's own rules, which the exporter must respect.
func testKernelRules(t *testing.T, tg Target) {
	e := exporter(tg)
	if _, err := e.Export("pvc-r", tg.Device(t)); err != nil {
		t.Fatal(err)
	}
	nqn := nvmet.NQN("pvc-r")
	ns := filepath.Join(tg.Root, "subsystems", nqn, "namespaces", "1")
	if err := tg.FS.WriteFile(filepath.Join(ns, "device_path"), tg.Device(t)); !errors.Is(err, syscall.EBUSY) {
		t.Errorf("device_path of an enabled namespace: %v", err)
	}
	if err := e.AllowHost("pvc-r", "nqn.2014-08.org.nvmexpress:uuid:bbbbbbbb-2222-3333-4444-555555555555"); err != nil {
		t.Fatal(err)
	}
	if err := tg.FS.WriteFile(filepath.Join(tg.Root, "subsystems", nqn, "attr_allow_any_host"), "1"); !errors.Is(err, syscall.EINVAL) {
		t.Errorf("allow_any_host with hosts linked: %v", err)
	}
	if err := tg.FS.WriteFile(filepath.Join(tg.Root, "ports", "1", "addr_traddr"), "127.0.0.2"); !errors.Is(err, syscall.EACCES) {
		t.Errorf("port address while in use: %v", err)
	}
	other := &nvmet.Exporter{FS: tg.FS, Root: tg.Root, Port: nvmet.Port{ID: 1, Address: "127.0.0.2", Service: 4420, Family: "ipv4"}}
	if _, err := other.Export("pvc-s", tg.Device(t)); !errors.Is(err, nvmet.ErrPortConflict) {
		t.Errorf("a second address on a port in use: %v", err)
	}
	if err := tg.FS.Rmdir(filepath.Join(tg.Root, "subsystems", nqn)); err == nil {
		t.Error("a subsystem with a namespace and links was removed")
	}
}
