package modroot

import (
	"os"
	"path/filepath"
	"testing"
)

func TestDirIsTheModuleAboveThePackage(t *testing.T) {
	got := Dir()
	b, err := os.ReadFile(filepath.Join(got, "go.mod"))
	if err != nil {
		t.Fatalf("Dir() = %s holds no go.mod: %v", got, err)
	}
	if want := "module github.com/pillarhq/pillar\n"; string(b[:len(want)]) != want {
		t.Fatalf("Dir() = %s is not the pillar module", got)
	}
	if _, err := os.Stat(filepath.Join(got, "impl", "testing", "modroot", "modroot.go")); err != nil {
		t.Fatalf("Dir() = %s is not this repository: %v", got, err)
	}
}

func TestDirWithoutAModuleIsTheWorkingDirectory(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	wd, _ := os.Getwd()
	if got := Dir(); got != wd {
		t.Fatalf("Dir() = %s, want the working directory %s", got, wd)
	}
}
