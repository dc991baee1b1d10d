package userns

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestMain lets the test binary serve as Create's helper.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == HelperCommand {
		os.Exit(HelperMain(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// newCreator returns a Creator running this test binary as its helper, and a
// leased range; it skips unless root.
func newCreator(tb testing.TB) (*Creator, Range) {
	tb.Helper()
	if os.Geteuid() != 0 {
		tb.Skip("needs root")
	}
	exe, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	c, err := NewCreator(exe)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	owner := tb.TempDir()
	a := NewAllocator("")
	r, err := a.Claim(owner, Range{})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = a.Release(owner, r) })
	return c, r
}

// inNS runs argv in the user namespace at userns as its root (nsenter(1)).
func inNS(t *testing.T, userns string, argv ...string) string {
	t.Helper()
	args := append([]string{"--user=" + userns, "--setuid=0", "--setgid=0", "--"}, argv...)
	out, err := exec.Command("nsenter", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("nsenter %v: %v\n%s", argv, err, out)
	}
	return string(out)
}

// newNamespaces creates a user namespace (and its network namespace) for a
// leased range, removed at cleanup; it returns their files and the range.
func newNamespaces(t *testing.T) (user, net string, r Range) {
	t.Helper()
	c, r := newCreator(t)
	dir := t.TempDir()
	user, net = filepath.Join(dir, "user"), filepath.Join(dir, "net")
	if err := c.Create(context.Background(), r, user, net); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = Remove(user); _ = Remove(net) })
	return user, net, r
}

func TestCreateOwnedByRangeRoot(t *testing.T) {
	user, net, r := newNamespaces(t)
	if owner, err := Owner(user); err != nil || owner != r.HostID {
		t.Fatalf("owner = %d, %v; want %d", owner, err, r.HostID)
	}
	for _, f := range []string{"uid_map", "gid_map"} {
		got := strings.Fields(inNS(t, user, "cat", "/proc/self/"+f))
		if want := strings.Fields(r.String()); strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s = %v, want %v", f, got, want)
		}
	}
	if got := strings.TrimSpace(inNS(t, user, "id", "-u")); got != "0" {
		t.Errorf("id -u inside = %q", got)
	}
	// The network namespace belongs to the new user namespace.
	nsfd, err := unix.Open(net, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(nsfd)
	ufd, err := unix.IoctlRetInt(nsfd, unix.NS_GET_USERNS)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(ufd)
	var owning, made unix.Stat_t
	if unix.Fstat(ufd, &owning) != nil || unix.Stat(user, &made) != nil || owning.Ino != made.Ino {
		t.Fatalf("netns owned by user namespace inode %d, want %d", owning.Ino, made.Ino)
	}
}

// The point of the owner: per-user counts of everything inside are charged to
// the range's root at the host level, never to host root. Root inside exhausts
// inotify instances; this process (host root) still gets one.
func TestCountsChargedToRangeRoot(t *testing.T) {
	user, _, _ := newNamespaces(t)
	limit := readInt(t, "/proc/sys/fs/inotify/max_user_instances")
	script := `import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
n = 0
while n < 100000 and libc.inotify_init1(0) >= 0:
    n += 1
print(n, ctypes.get_errno(), flush=True)
os.read(0, 1)
`
	cmd := exec.Command("nsenter", "--user="+user, "--setuid=0", "--setgid=0", "--", "python3", "-c",
		script)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Skipf("python3: %v", err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	line, _ := bufio.NewReader(out).ReadString('\n')
	f := strings.Fields(line)
	if len(f) != 2 || f[1] != strconv.Itoa(int(unix.EMFILE)) {
		t.Fatalf("exhaust inside: %q", line)
	}
	if got, _ := strconv.Atoi(f[0]); got > limit {
		t.Fatalf("held %d inotify instances, per-user limit %d", got, limit)
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Fatalf("host root's inotify_init1 while the namespace holds %s: %v", f[0], err)
	}
	unix.Close(fd)
	t.Logf("root inside holds %s inotify instances (limit %d); host root unaffected", f[0], limit)
}

func TestCreateFailsCleanly(t *testing.T) {
	c, r := newCreator(t)
	dir := t.TempDir()
	user, net := filepath.Join(dir, "user"), filepath.Join(dir, "net")
	if err := os.WriteFile(net, nil, 0o444); err != nil { // taken
		t.Fatal(err)
	}
	if err := c.Create(context.Background(), r, user, net); err == nil {
		t.Fatal("Create over an existing file succeeded")
	}
	if _, err := os.Lstat(user); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("user namespace file left after failure: %v", err)
	}
	if _, err := os.Lstat(net); err != nil {
		t.Fatalf("the file in the way was removed: %v", err)
	}
	for _, bad := range []Range{{}, {HostID: 0, Size: RangeSize}, {HostID: 1<<32 - 10, Size: RangeSize}} {
		if err := c.Create(context.Background(), bad, user, filepath.Join(dir, "net2")); err == nil {
			t.Errorf("Create with range %v succeeded", bad)
		}
	}
}

func readInt(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// BenchmarkCreate measures Create (two helper processes, the maps, two bind
// mounts) plus Remove of both files, reporting the median in ms.
func BenchmarkCreate(b *testing.B) {
	c, r := newCreator(b)
	dir := b.TempDir()
	user, net := filepath.Join(dir, "user"), filepath.Join(dir, "net")
	var ds []time.Duration
	for b.Loop() {
		t0 := time.Now()
		if err := c.Create(context.Background(), r, user, net); err != nil {
			b.Fatal(err)
		}
		ds = append(ds, time.Since(t0))
		if err := errors.Join(Remove(user), Remove(net)); err != nil {
			b.Fatal(err)
		}
	}
	slices.Sort(ds)
	b.ReportMetric(float64(ds[len(ds)/2])/float64(time.Millisecond), "create-ms")
}
