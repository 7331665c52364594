package agent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	agentv1 "github.com/pillarhq/pillar/impl/pillar/agentapi/v1"
	"github.com/pillarhq/pillar/impl/pillar/backend"
	"github.com/pillarhq/pillar/impl/pillar/backend/lvm"
	"github.com/pillarhq/pillar/impl/pillar/nvmet"
)

// unexportServer is an agent whose calls tested here never reach a tool:
// unexport of a volume that is not exported touches only configfs (an
// empty directory).
func unexportServer(t *testing.T, stateDir, target string) *Server {
	t.Helper()
	set, err := backend.NewSet(lvm.New(lvm.Config{VolumeGroup: "vg0", DeviceRoot: "/sim"}, nil))
	if err != nil {
		t.Fatal(err)
	}
	return mustNew(t, Options{Backends: set, Exporter: &nvmet.Exporter{FS: nvmet.OSFS{}, Root: target}, StateDir: stateDir})
}

func unexport(s *Server, gen uint64) error {
	_, err := s.UnexportVolume(context.Background(), &agentv1.UnexportVolumeRequest{Pool: "vg0", Name: "pvc-1", Generation: gen})
	return err
}

// Two changes, then a restart (a new Server on the same state directory):
// a request decided on the first change's generation is refused by the
// restarted agent; without a state directory it was accepted.
func TestGenerationSurvivesRestart(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		stateDir string
		want     codes.Code
	}{
		{"state dir", t.TempDir(), codes.Aborted},
		{"memory only", "", codes.OK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			target := t.TempDir()
			s := unexportServer(t, tc.stateDir, target)
			if err := unexport(s, 0); err != nil {
				t.Fatal(err)
			}
			if err := unexport(s, 1); err != nil {
				t.Fatal(err)
			}
			if g := s.generation(nvmet.NQN("vg0:pvc-1")); g != 2 {
				t.Fatalf("generation %d after two changes, want 2", g)
			}
			restarted := unexportServer(t, tc.stateDir, target)
			if got := status.Code(unexport(restarted, 1)); got != tc.want {
				t.Fatalf("a request decided at generation 1 after the restart: %s, want %s", got, tc.want)
			}
		})
	}
}

// When the generation cannot be recorded, the change is not made:
// UNAVAILABLE, and the generation stays where it was.
func TestGenerationNotRecordedChangesNothing(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	s := unexportServer(t, dir, t.TempDir())
	if err := unexport(s, 0); err != nil {
		t.Fatal(err)
	}
	// The directory replaced by a file: no temporary file can be made in it.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	err := unexport(s, 1)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "record the export's generation") {
		t.Fatalf("got %v, want UNAVAILABLE naming the record", err)
	}
	if g := s.generation(nvmet.NQN("vg0:pvc-1")); g != 1 {
		t.Fatalf("generation %d, want 1 (unchanged)", g)
	}
}

// A file the agent cannot read stops it instead of starting from zero.
func TestGenerationsFileUnreadableStopsTheAgent(t *testing.T) {
	t.Parallel()
	for name, content := range map[string]string{
		"not json":      "{",
		"other version": `{"version":2,"generations":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, generationsFile), []byte(content), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := New(Options{StateDir: dir})
			if err == nil || !strings.Contains(err.Error(), "--state-dir") {
				t.Fatalf("New with %q: %v", content, err)
			}
		})
	}
}

// Deleting a volume drops its generation from the file, which otherwise
// grows with every volume ever exported.
func TestGenerationForgotten(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	g, err := loadGenerations(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, nqn := range []string{"a", "b"} {
		if err := g.advance(nqn, 0); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.forget("a"); err != nil {
		t.Fatal(err)
	}
	again, err := loadGenerations(dir)
	if err != nil {
		t.Fatal(err)
	}
	if again.get("a") != 0 || again.get("b") != 1 || again.len() != 1 {
		t.Fatalf("after forgetting a: %v", again.m)
	}
}
