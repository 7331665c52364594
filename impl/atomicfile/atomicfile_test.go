package atomicfile_test

import (
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/pillarhq/pillar/impl/atomicfile"
)

func TestWriteReplacesWithModeAndLeavesNoTemporary(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "key")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.Write(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("content %q, %v", got, err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, %v; want 0600", fi.Mode().Perm(), err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want the file alone", len(ents))
	}
}

// Concurrent writers never leave a mixed file: the result is one of the
// contents written whole.
func TestConcurrentWritersLeaveOneWholeContent(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state")
	contents := []string{"aaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbb", "cccccccccccccccc", "dddddddddddddddd"}
	var wg sync.WaitGroup
	for _, c := range contents {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				if err := atomicfile.Write(path, []byte(c), 0o600); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, c := range contents {
		found = found || string(got) == c
	}
	if !found {
		t.Fatalf("file holds %q, not one of the contents written", got)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("directory holds %d entries, want the file alone", len(ents))
	}
}

func TestWriteIntoMissingDirectoryFails(t *testing.T) {
	if err := atomicfile.Write(filepath.Join(t.TempDir(), "no", "such"), []byte("x"), 0o600); err == nil {
		t.Fatal("wrote into a directory that does not exist")
	}
}
