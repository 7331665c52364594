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
