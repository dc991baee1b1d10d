// Package atomicfile replaces files so that a reader, or the file system
// after a crash, sees the old content or the new one, never a part: the new
// content goes to a temporary file beside the target, is flushed to disk and
// renamed over it.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
)

// Write replaces path with data, with permissions perm (set as given: the
// umask does not apply). The temporary file is named
// <path>.tmp-<random> and removed on failure. For the rename itself to be
// durable, SyncDir the directory afterwards. Errors are wrapped with path.
func Write(path string, data []byte, perm os.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	err = f.Chmod(perm)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// SyncDir flushes directory dir to disk: the names created, renamed or
// removed in it become durable. Errors are wrapped with dir.
func SyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}
