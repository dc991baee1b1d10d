package testregistry

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// DebianTree returns a minimal Debian bookworm root filesystem (mmdebstrap
// --variant=minbase: apt and a shell, no sudo, no user "user", no Python),
// made once under <repo>/.cache/test-images and reused. Concurrent callers
// share one build. It needs root and mmdebstrap.
func DebianTree(repo string) (string, error) {
	dir := filepath.Join(repo, ".cache", "test-images")
	tree := filepath.Join(dir, "debian-bookworm-minbase")
	if _, err := os.Stat(filepath.Join(tree, "etc", "debian_version")); err == nil {
		return tree, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	lock, err := os.OpenFile(filepath.Join(dir, ".lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return "", err
	}
	defer lock.Close()
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(tree, "etc", "debian_version")); err == nil {
		return tree, nil // made while we waited
	}
	tmp := tree + ".tmp-" + strconv.Itoa(os.Getpid())
	os.RemoveAll(tmp)
	cmd := exec.Command("mmdebstrap", "--mode=root", "--format=directory", "--variant=minbase", "bookworm", tmp)
	if out, err := cmd.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("mmdebstrap: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, tree); err != nil {
		return "", err
	}
	return tree, nil
}
