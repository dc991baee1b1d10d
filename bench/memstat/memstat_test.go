package memstat

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

const mib = 1 << 20

func TestParseRollup(t *testing.T) {
	in := "55d0c0000000-7ffc0000000 ---p 00000000 00:00 0                          [rollup]\n" +
		"Rss:               12572 kB\nPss:                4100 kB\nPss_Anon:           3000 kB\n" +
		"Shared_Clean:       8000 kB\nPrivate_Clean:       100 kB\nPrivate_Dirty:      3000 kB\n"
	p, err := ParseRollup([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	want := Procs{Count: 1, RSS: 12572 << 10, PSS: 4100 << 10, USS: 3100 << 10}
	if !reflect.DeepEqual(p, want) {
		t.Fatalf("got %+v, want %+v", p, want)
	}
	if _, err := ParseRollup([]byte("Rss: 1 kB\n")); err == nil {
		t.Fatal("rollup without Pss parsed")
	}
}

func TestParseStat(t *testing.T) {
	st, err := ParseStat([]byte("cache 4096\nrss 8192\ntotal_rss 8192\n"))
	if err != nil || st["total_rss"] != 8192 || st["cache"] != 4096 {
		t.Fatalf("stat %v, %v", st, err)
	}
	if _, err := ParseStat([]byte("rss -1\n")); err == nil {
		t.Fatal("negative value parsed")
	}
}

func TestReadRollupSelf(t *testing.T) {
	p, err := ReadRollup(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if p.PSS == 0 || p.RSS < p.PSS || p.USS > p.RSS {
		t.Fatalf("implausible rollup of the test process: %+v", p)
	}
}

func TestMeasureMissingCgroup(t *testing.T) {
	if _, err := MemoryCgroupDir("/"); errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no memory cgroup on this host")
	}
	_, err := Measure("/cubby-bench-t" + randomSuffix(t) + "-absent")
	if !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("want fs.ErrNotExist, got %v", err)
	}
	if _, err := Measure("relative/path"); err == nil {
		t.Fatal("relative cgroups path accepted")
	}
}

// TestMeasureRealCgroup puts a real python3 process that holds 32 MiB of touched
// anonymous memory into a fresh memory cgroup and checks both views see it.
func TestMeasureRealCgroup(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("creating a cgroup needs root")
	}
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed")
	}
	cgPath := "/cubby-bench-t" + randomSuffix(t)
	dir, err := MemoryCgroupDir(cgPath)
	if errors.Is(err, errors.ErrUnsupported) {
		t.Skip("no memory cgroup on this host")
	} else if err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.Remove(dir) })

	prog := "import sys; b = b'\\x01' * (32 << 20); print('ready', flush=True); sys.stdin.read()"
	cmd := exec.Command("/bin/sh", "-c", `echo $$ > "$1"/cgroup.procs && exec "$2" -c "$3"`, "sh", dir, py, prog)
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
	t.Cleanup(func() { _ = stdin.Close(); _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("child said %q, %v", line, err)
	}

	s, err := Measure(cgPath)
	if err != nil {
		t.Fatal(err)
	}
	if s.Procs.Count != 1 {
		t.Errorf("procs %d, want 1 (the python3 child)", s.Procs.Count)
	}
	if s.Memcg.Anon < 32*mib || s.Memcg.Usage < s.Memcg.Anon {
		t.Errorf("memcg %+v: want ≥ 32 MiB anon within usage", s.Memcg)
	}
	if s.Procs.PSS < 32*mib || s.Procs.USS < 32*mib {
		t.Errorf("procs %+v: want ≥ 32 MiB PSS and USS", s.Procs)
	}
	if got := s.Procs.PSSByName["python3"]; got != s.Procs.PSS {
		t.Errorf("PSS by name %v: want all %d bytes under python3", s.Procs.PSSByName, s.Procs.PSS)
	}
	if ws := s.Memcg.WorkingSet(); ws > s.Memcg.Usage || ws < s.Memcg.Anon {
		t.Errorf("working set %d outside [anon %d, usage %d]", ws, s.Memcg.Anon, s.Memcg.Usage)
	}
	if filepath.Base(dir) != strings.TrimPrefix(cgPath, "/") {
		t.Errorf("cgroup dir %s does not end in %s", dir, cgPath)
	}
}

func randomSuffix(t *testing.T) string {
	t.Helper()
	b := make([]byte, 4)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
