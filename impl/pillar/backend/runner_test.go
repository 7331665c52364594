package backend

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTool(t *testing.T, dir, name, script string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, name), []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestExecRunner(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeTool(t, dir, "ok", `echo "args:$*"; echo "lang:$LC_ALL extra:$PILLAR_TEST"`)
	writeTool(t, dir, "fail", `echo partial; echo "  Volume group \"vg0\" not found" >&2; exit 5`)
	r := &ExecRunner{Dir: dir, Env: []string{"PILLAR_TEST=yes"}}
	ctx := context.Background()

	out, err := r.Run(ctx, "ok", "-o", "a b")
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "args:-o a b\nlang:C extra:yes\n" {
		t.Fatalf("stdout %q", got)
	}

	out, err = r.Run(ctx, "fail", "vg0")
	var ce *CommandError
	if !errors.As(err, &ce) || ce.ExitCode != 5 || ce.DidNotRun() || !strings.Contains(ce.Stderr, `Volume group "vg0" not found`) {
		t.Fatalf("failing tool: %#v", err)
	}
	if string(out) != "partial\n" {
		t.Fatalf("stdout of a failing tool %q", out)
	}
	if want := `fail vg0: exit status 5: Volume group "vg0" not found`; err.Error() != want {
		t.Fatalf("error text %q, want %q", err.Error(), want)
	}

	_, err = r.Run(ctx, "absent")
	if !errors.As(err, &ce) || !ce.DidNotRun() || ce.Err == nil {
		t.Fatalf("missing tool: %#v", err)
	}

	canceled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = r.Run(canceled, "ok")
	if !errors.As(err, &ce) || !ce.DidNotRun() || !errors.Is(err, context.Canceled) {
		t.Fatalf("canceled run: %#v", err)
	}
}

func TestSet(t *testing.T) {
	t.Parallel()
	a, b := fakeBackend("tank"), fakeBackend("vg0")
	s, err := NewSet(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := s.Lookup("vg0"); err != nil || got != b {
		t.Fatalf("Lookup(vg0) = %v, %v", got, err)
	}
	if _, err := s.Lookup("other"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Lookup(other) = %v", err)
	}
	if got := strings.Join(s.Names(), ","); got != "tank,vg0" {
		t.Fatalf("Names = %s", got)
	}
	if _, err := NewSet(a, fakeBackend("tank")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("duplicate names: %v", err)
	}
}

// fakeBackend only has a name; Set needs nothing else.
type fakeBackend string

func (f fakeBackend) Name() string { return string(f) }
func (fakeBackend) Kind() Kind     { return KindZFS }
func (fakeBackend) Layout() Layout { return Layout{} }
func (fakeBackend) Discover(context.Context) Pool {
	return Pool{}
}
func (fakeBackend) Capacity(context.Context, map[string]string) (Capacity, error) {
	return Capacity{}, nil
}
func (fakeBackend) CreateVolume(context.Context, string, int64, map[string]string) (Volume, error) {
	return Volume{}, nil
}
func (fakeBackend) GetVolume(context.Context, string) (Volume, error) { return Volume{}, nil }
func (fakeBackend) ListVolumes(context.Context) ([]Volume, error)     { return nil, nil }
func (fakeBackend) ExpandVolume(context.Context, string, int64) (Volume, error) {
	return Volume{}, nil
}
func (fakeBackend) DeleteVolume(context.Context, string) error { return nil }
func (fakeBackend) DevicePath(string) string                   { return "" }
func (fakeBackend) CreateSnapshot(context.Context, string, string) (Snapshot, error) {
	return Snapshot{}, nil
}
func (fakeBackend) GetSnapshot(context.Context, string) (Snapshot, error) { return Snapshot{}, nil }
func (fakeBackend) ListSnapshots(context.Context) ([]Snapshot, error)     { return nil, nil }
func (fakeBackend) DeleteSnapshot(context.Context, string) error          { return nil }
func (fakeBackend) CreateVolumeFrom(context.Context, string, int64, Source, map[string]string) (Volume, error) {
	return Volume{}, nil
}

func TestValidateVolumeName(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"pvc-0b3f", "a", "A.b_c-1", strings.Repeat("x", MaxVolumeNameLen)} {
		if err := ValidateVolumeName(ok); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	for _, bad := range []string{"", "-a", ".a", "_a", "a/b", "a b", "a:b", "a+b", "a@b", strings.Repeat("x", MaxVolumeNameLen+1)} {
		if err := ValidateVolumeName(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

func TestClassifySentinels(t *testing.T) {
	t.Parallel()
	for _, s := range sentinels {
		wrapped := errors.Join(errors.New("context"), s)
		if Classify(wrapped) != s { //nolint:errorlint // Classify must return the sentinel itself
			t.Errorf("Classify(%v) = %v", wrapped, Classify(wrapped))
		}
	}
	if Classify(errors.New("plain")) != nil {
		t.Error("plain errors carry no sentinel")
	}
}
