package cgroups

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

func TestModeMatchesMountinfo(t *testing.T) {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	types := map[string]string{}
	for _, m := range mounts {
		types[m.Point] = m.FSType
	}
	want := LayoutNone
	switch {
	case types[Root] == "cgroup2":
		want = LayoutV2
	case types[Root+"/unified"] == "cgroup2":
		want = LayoutHybrid
	case types[Root+"/memory"] == "cgroup" || types[Root] == "tmpfs":
		want = LayoutV1
	}
	if got := Mode(); got != want {
		t.Errorf("Mode() = %s, mountinfo says %s", got, want)
	}
}

func TestReadMissing(t *testing.T) {
	if Mode() == LayoutNone {
		t.Skip("no cgroupfs")
	}
	_, err := Read("/cubby-missing-" + suffix(t))
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("Read of a missing cgroup: %v, want fs.ErrNotExist", err)
	}
	if _, err := Read("relative/path"); err == nil {
		t.Error("relative path accepted")
	}
}

func suffix(t *testing.T) string {
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "t" + hex.EncodeToString(b)
}

// makeCgroup creates the cgroup path in every hierarchy Read looks at, limits its
// memory to limit bytes and removes it at cleanup. It returns the directories to
// write a pid into.
func makeCgroup(t *testing.T, path string, limit uint64) []string {
	var dirs []string
	limitFile := ""
	switch Mode() {
	case LayoutV2:
		d := filepath.Join(Root, path)
		dirs, limitFile = []string{d}, filepath.Join(d, "memory.max")
	case LayoutV1, LayoutHybrid:
		d, err := v1Dirs(path)
		if err != nil {
			t.Skip(err)
		}
		dirs, limitFile = []string{d.CPUAcct, d.Memory}, filepath.Join(d.Memory, "memory.limit_in_bytes")
		if d.Pids != "" {
			dirs = append(dirs, d.Pids)
		}
	default:
		t.Skip("no cgroupfs")
	}
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("cannot create cgroup (needs root): %v", err)
		}
		t.Cleanup(func() {
			if err := os.Remove(d); err != nil {
				t.Errorf("remove cgroup: %v", err)
			}
		})
	}
	if err := os.WriteFile(limitFile, []byte(strconv.FormatUint(limit, 10)), 0); err != nil {
		t.Fatal(err)
	}
	return dirs
}

func TestReadLiveCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	path := "/cubby-" + suffix(t)
	const limit = 256 << 20
	dirs := makeCgroup(t, path, limit)

	// The shell waits for a line, then (inside the cgroup) builds a 4 MB string,
	// reports ready and waits again.
	cmd := exec.Command("/bin/busybox", "sh", "-c",
		`read x; v=$(busybox head -c 4000000 /dev/zero | busybox tr '\0' a); echo ready; read y; exit 0`)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stdin.Close(); cmd.Process.Kill(); cmd.Wait() })
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := stdin.Write([]byte("go\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "ready\n" {
		t.Fatalf("child: %q %v", line, err)
	}
	s, err := Read(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", s)
	if s.CPUUsageNs == 0 || s.MemUsed < 4000000 || s.MemLimit != limit || s.PidsCurrent != 1 {
		t.Errorf("sample %+v: want CPU > 0, MemUsed >= 4 MB, limit %d, 1 pid", s, limit)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Errorf("child: %v", err)
	}
}

// TestReadV2Files checks the cgroup v2 parser against fixture files laid out like
// a cgroup2 directory (a stand-in: this host may not run pure v2).
func TestReadV2Files(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"cpu.stat":       "usage_usec 1500\nuser_usec 1000\nsystem_usec 500\n",
		"memory.current": "10485760\n",
		"memory.stat":    "anon 6291456\nfile 4194304\ninactive_file 3145728\nactive_file 1048576\n",
		"memory.max":     "max\n",
		"memory.events":  "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n",
		"pids.current":   "7\n",
	}
	for name, body := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ReadV2(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{CPUUsageNs: 1500000, MemUsed: 7340032, MemCache: 4194304, MemLimit: 0, PidsCurrent: 7, OOMKills: 1}
	if s != want {
		t.Errorf("ReadV2 = %+v, want %+v", s, want)
	}
	os.Remove(filepath.Join(dir, "pids.current"))
	if s, err := ReadV2(dir); err != nil || s.PidsCurrent != 0 {
		t.Errorf("without pids controller: %+v %v", s, err)
	}
	if _, err := ReadV2(filepath.Join(dir, "gone")); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("missing dir: %v", err)
	}
}

// TestReadV1Files checks the cgroup v1 parser against fixture files.
func TestReadV1Files(t *testing.T) {
	d := V1Dirs{CPUAcct: t.TempDir(), Memory: t.TempDir(), Pids: t.TempDir()}
	files := map[string]string{
		filepath.Join(d.CPUAcct, "cpuacct.usage"):        "123456789\n",
		filepath.Join(d.Memory, "memory.usage_in_bytes"): "20971520\n",
		filepath.Join(d.Memory, "memory.stat"):           "cache 1\ninactive_file 2\ntotal_cache 8388608\ntotal_inactive_file 4194304\n",
		filepath.Join(d.Memory, "memory.limit_in_bytes"): "9223372036854771712\n",
		filepath.Join(d.Memory, "memory.oom_control"):    "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n",
		filepath.Join(d.Pids, "pids.current"):            "3\n",
	}
	for name, body := range files {
		if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	s, err := ReadV1(d)
	if err != nil {
		t.Fatal(err)
	}
	want := Sample{CPUUsageNs: 123456789, MemUsed: 16777216, MemCache: 8388608, MemLimit: 0, PidsCurrent: 3, OOMKills: 2}
	if s != want {
		t.Errorf("ReadV1 = %+v, want %+v", s, want)
	}
}
