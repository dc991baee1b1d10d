// Package testcgroup creates throwaway cgroups for tests that need a real
// memory limit (root and a cgroup v1 memory hierarchy; skipped otherwise).
package testcgroup

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// V1MemoryRoot is the cgroup v1 memory hierarchy NewV1Memory creates cgroups in.
const V1MemoryRoot = "/sys/fs/cgroup/memory"

// NewV1Memory creates "<V1MemoryRoot>/cubby-<prefix>-t<random hex>" with
// memory.limit_in_bytes = limit (bytes) and returns its path. At cleanup every
// task still in it is killed (SIGKILL) and the directory is removed, retried
// for up to 5 s while tasks are still charged. The test is skipped without
// root or a v1 memory hierarchy.
func NewV1Memory(t testing.TB, prefix string, limit int64) string {
	t.Helper()
	if _, err := os.Stat(filepath.Join(V1MemoryRoot, "memory.oom_control")); err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and a cgroup v1 memory hierarchy at " + V1MemoryRoot)
	}
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	dir := filepath.Join(V1MemoryRoot, "cubby-"+prefix+"-t"+hex.EncodeToString(b))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { remove(t, dir) })
	if err := os.WriteFile(filepath.Join(dir, "memory.limit_in_bytes"), []byte(strconv.FormatInt(limit, 10)), 0); err != nil {
		t.Fatal(err)
	}
	return dir
}

// remove kills the tasks left in dir and removes it (see NewV1Memory).
func remove(t testing.TB, dir string) {
	data, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	for _, f := range strings.Fields(string(data)) {
		if pid, err := strconv.Atoi(f); err == nil {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		err := os.Remove(dir)
		if err == nil || time.Now().After(deadline) {
			if err != nil {
				t.Errorf("remove cgroup %s: %v", dir, err)
			}
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
}
