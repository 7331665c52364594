package configfs

import (
	"errors"
	"syscall"
	"testing"
)

func TestRules(t *testing.T) {
	f := New("/cfg")
	sub := "/cfg/subsystems/nqn.test"
	for _, c := range []struct {
		name string
		err  error
		want syscall.Errno
	}{
		{"mkdir outside a group", f.Mkdir("/cfg/other"), syscall.EPERM},
		{"mkdir without parent", f.Mkdir("/cfg/subsystems/x/namespaces/1"), syscall.ENOENT},
		{"subsystem", f.Mkdir(sub), 0},
		{"subsystem twice", f.Mkdir(sub), syscall.EEXIST},
		{"namespace", f.Mkdir(sub + "/namespaces/1"), 0},
		{"unknown attribute", f.WriteFile(sub+"/attr_nope", "1"), syscall.ENOENT},
		{"enable without a device", f.WriteFile(sub+"/namespaces/1/enable", "1"), syscall.ENOENT},
		{"unknown device", f.WriteFile(sub+"/namespaces/1/device_path", "/dev/none"), 0},
		{"enable an unknown device", f.WriteFile(sub+"/namespaces/1/enable", "1"), syscall.ENOENT},
		{"host link while allow_any_host is on", func() error { f.Mkdir("/cfg/hosts/h"); return f.Symlink("/cfg/hosts/h", sub+"/allowed_hosts/h") }(), syscall.EINVAL},
		{"port link without a transport", func() error { f.Mkdir("/cfg/ports/1"); return f.Symlink(sub, "/cfg/ports/1/subsystems/nqn.test") }(), syscall.EINVAL},
		{"bad transport", f.WriteFile("/cfg/ports/1/addr_trtype", "smoke"), syscall.EINVAL},
		{"remove an attribute", f.Remove(sub + "/attr_model"), syscall.EPERM},
		{"rmdir a subsystem with a namespace", f.Rmdir(sub), syscall.ENOTEMPTY},
	} {
		if c.want == 0 {
			if c.err != nil {
				t.Errorf("%s: %v", c.name, c.err)
			}
			continue
		}
		if !errors.Is(c.err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, c.err, c.want)
		}
	}
	f.AddDevice("/dev/ok")
	if err := f.WriteFile(sub+"/namespaces/1/device_path", "/dev/ok"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(sub+"/namespaces/1/enable", "1"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(sub+"/namespaces/1/device_uuid", "x"); !errors.Is(err, syscall.EBUSY) {
		t.Fatalf("uuid while enabled: %v", err)
	}
}

// A tree opened from a state file holds what the previous process left,
// as configfs outlives the agent; a revalidate needs an enabled namespace.
func TestPersistence(t *testing.T) {
	state := t.TempDir() + "/configfs.json"
	f, err := Open("/cfg", state)
	if err != nil {
		t.Fatal(err)
	}
	f.DeviceExists = func(p string) bool { return p == "/dev/vol" }
	sub := "/cfg/subsystems/nqn.keep"
	for _, err := range []error{
		f.Mkdir(sub), f.Mkdir(sub + "/namespaces/1"),
		f.WriteFile(sub+"/namespaces/1/device_path", "/dev/vol"),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := f.WriteFile(sub+"/namespaces/1/revalidate_size", "1"); !errors.Is(err, syscall.EINVAL) {
		t.Fatalf("revalidate while disabled: %v", err)
	}
	if err := f.WriteFile(sub+"/namespaces/1/enable", "1"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile(sub+"/namespaces/1/revalidate_size", "1"); err != nil {
		t.Fatal(err)
	}
	g, err := Open("/cfg", state)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := g.ReadFile(sub + "/namespaces/1/enable"); err != nil || v != "1" {
		t.Fatalf("reopened enable = %q, %v", v, err)
	}
	if _, err := Open("/other", state); err == nil {
		t.Fatal("a state file of another root was accepted")
	}
}

// A subsystem linked into a port again gets a link of another number than
// the one removed, so a controller of the old link is not taken for alive.
func TestPortLinkNumbersAreNotReused(t *testing.T) {
	f := New("/cfg")
	sub := "/cfg/subsystems/nqn.x"
	if err := f.Mkdir(sub); err != nil {
		t.Fatal(err)
	}
	if err := f.Mkdir("/cfg/ports/1"); err != nil {
		t.Fatal(err)
	}
	if err := f.WriteFile("/cfg/ports/1/addr_trtype", "tcp"); err != nil {
		t.Fatal(err)
	}
	link := "/cfg/ports/1/subsystems/nqn.x"
	if err := f.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	first := f.PortLinks("nqn.x")["1"]
	if err := f.Remove(link); err != nil {
		t.Fatal(err)
	}
	if got := f.PortLinks("nqn.x"); len(got) != 0 {
		t.Fatalf("links after removal: %v", got)
	}
	if err := f.Symlink(sub, link); err != nil {
		t.Fatal(err)
	}
	if again := f.PortLinks("nqn.x")["1"]; again == first || again == 0 {
		t.Fatalf("link numbers: first %d, again %d", first, again)
	}
}
