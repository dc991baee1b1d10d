package cgroups

import (
	"bufio"
	"os"
	"os/exec"
	"testing"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/internal/testenv/testcgroup"
)

func TestMemoryOfFindsProcessCgroup(t *testing.T) {
	dir := testcgroup.NewV1Memory(t, "memcg", 32<<20)
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && echo moved && exec sleep 60`, "sh", dir)
	r, w, _ := os.Pipe()
	cmd.Stdout = w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait(); r.Close() })
	// sh says "moved" once it wrote itself into the cgroup.
	if line, err := bufio.NewReader(r).ReadString('\n'); line != "moved\n" {
		t.Fatalf("sh: %q, %v", line, err)
	}
	if cg, err := MemoryOf(cmd.Process.Pid); err != nil || cg.Dir() != dir {
		t.Fatalf("MemoryOf(%d) = %+v, %v; want %s", cmd.Process.Pid, cg, err, dir)
	}
	cg, err := OpenMemory(dir)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := cg.OOMKills(); err != nil || n != 0 {
		t.Fatalf("OOMKills = %d, %v", n, err)
	}
	if l, err := cg.MemoryLimit(); err != nil || l != 32<<20 {
		t.Fatalf("MemoryLimit = %d, %v", l, err)
	}
	self, err := MemoryOf(0)
	if err != nil || self.Dir() == dir {
		t.Fatalf("MemoryOf(self) = %+v, %v", self, err)
	}
	if _, err := OpenMemory(t.TempDir()); err == nil {
		t.Fatal("OpenMemory(non-cgroup dir) succeeded")
	}
}

// TestUnderContainerMount: inside a container the cgroupfs mount shows only the
// container's subtree (mount root = its cgroup path).
func TestUnderContainerMount(t *testing.T) {
	m := mountinfo.Mount{Root: "/cubby/abc", Point: "/sys/fs/cgroup/memory"}
	for path, want := range map[string]string{
		"/cubby/abc":     "/sys/fs/cgroup/memory",
		"/cubby/abc/sub": "/sys/fs/cgroup/memory/sub",
		"/cubby/abcd":    "",
		"/other":         "",
	} {
		got := under(m, path)
		if (want == "" && got != nil) || (want != "" && (len(got) != 1 || got[0] != want)) {
			t.Errorf("under(%s) = %v, want %q", path, got, want)
		}
	}
	if got := under(mountinfo.Mount{Root: "/", Point: "/sys/fs/cgroup/memory"}, "/a/b"); len(got) != 1 || got[0] != "/sys/fs/cgroup/memory/a/b" {
		t.Errorf("root mount: %v", got)
	}
	v1, v2, has := parseProcCgroup([]byte("5:cpu,cpuacct:/x\n4:memory:/cubby/abc\n0::/\n"))
	if v1 != "/cubby/abc" || v2 != "/" || !has {
		t.Errorf("parseProcCgroup = %q %q %v", v1, v2, has)
	}
}
