// Package atomicfile replaces a file so that a reader or a crash sees the
// old content or the new, never a part of either.
package atomicfile

import (
	"os"
	"path/filepath"
)

// Write replaces path with data at mode perm: a temporary file beside it,
// written and synced, renamed over path, then the directory synced so the
// rename itself survives a crash. The temporary name is unique (O_EXCL),
// so two writers never share one; the last rename wins. The directory
// must exist.
func Write(path string, data []byte, perm os.FileMode) error {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // nothing to remove after the rename
	if err := f.Chmod(perm); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
