package security

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
	"github.com/cubby-dev/cubby/sdk"
)

// Finding "root inside is root outside": without a user namespace uid 0 in a
// sandbox is host uid 0, so the kernel's per-user counts (inotify instances,
// RLIMIT_NPROC, ...) are shared with the host and with every other sandbox.

// holdInotify is a Python program that opens inotify instances until the
// kernel refuses (or 4096), writes "<count> <errno>" to the file named by its
// argument and keeps them open for two minutes.
const holdInotify = `import ctypes, os, sys, time
libc = ctypes.CDLL(None, use_errno=True)
fds = []
while len(fds) < 4096:
    fd = libc.inotify_init1(0)
    if fd < 0:
        break
    fds.append(fd)
with open(sys.argv[1] + '.tmp', 'w') as f:
    f.write('%d %d' % (len(fds), ctypes.get_errno()))
os.rename(sys.argv[1] + '.tmp', sys.argv[1])
time.sleep(120)
`

// TestUsernsInotifyExhaustion: root and the user in sandbox A open and hold
// every inotify instance the kernel gives them. Host root (this test process)
// must still get one, and sandbox B's WatchDir (which needs one in B's agent)
// must still work.
func TestUsernsInotifyExhaustion(t *testing.T) {
	s := startServer(t)
	a, b := s.create(t, "base"), s.create(t, "base")
	if r := asRoot(t, a, "cat > /tmp/hold.py <<'EOF'\n"+holdInotify+"EOF\nchmod 644 /tmp/hold.py"); r.Code != 0 {
		t.Fatalf("write holder: %s", r.Out)
	}
	for _, user := range []string{"root", "user"} {
		cmd := fmt.Sprintf("setsid nohup python3 /tmp/hold.py /tmp/%s.count >/dev/null 2>&1 </dev/null &", user)
		if r := run(t, a, user, cmd); r.Code != 0 {
			t.Fatalf("start holder as %s: %s", user, r.Out)
		}
		// Wait until the holder gave up (EMFILE), so both hold at once.
		held := waitFile(t, a, "/tmp/"+user+".count")
		t.Logf("sandbox A as %s holds %s inotify instances (count, errno)", user, held)
		if f := strings.Fields(held); len(f) != 2 || f[1] != strconv.Itoa(int(unix.EMFILE)) {
			t.Fatalf("holder as %s did not exhaust its inotify instances: %q", user, held)
		}
	}
	defer asRoot(t, a, "pkill -f /tmp/hold.py")

	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC)
	if err != nil {
		t.Errorf("host root's inotify_init1 fails while sandbox A holds its instances: %v", err)
	} else {
		unix.Close(fd)
	}
	if err := watchWorks(b); err != nil {
		t.Errorf("sandbox B's WatchDir while sandbox A holds its instances: %v", err)
	}
	s.healthy(t)
}

// waitFile returns the content of path in sbx once it exists (30 s at most).
func waitFile(t *testing.T, sbx *sdk.Sandbox, path string) string {
	t.Helper()
	r := asRoot(t, sbx, fmt.Sprintf("for i in $(seq 300); do [ -s %s ] && break; sleep 0.1; done; cat %s", path, path))
	if r.Code != 0 {
		t.Fatalf("wait for %s: %s", path, r.Out)
	}
	return strings.TrimSpace(r.Out)
}

// watchWorks watches /tmp of sbx through the SDK and waits for the event of a
// file written into it.
func watchWorks(sbx *sdk.Sandbox) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := sbx.Files.WatchDir(ctx, "/tmp", &sdk.WatchOptions{Timeout: time.Minute})
	if err != nil {
		return err
	}
	defer w.Stop()
	if _, err := sbx.Files.Write(ctx, "/tmp/watched", []byte("x"), nil); err != nil {
		return err
	}
	for {
		select {
		case ev, ok := <-w.Events():
			if !ok {
				return fmt.Errorf("watch ended: %v", w.Err())
			}
			if ev.Name == "watched" {
				return nil
			}
		case <-ctx.Done():
			return errors.New("no event for a file written into the watched directory")
		}
	}
}

// TestUsernsNprocPerSandbox: the user of sandbox A runs 300 processes; the
// user of sandbox B, with RLIMIT_NPROC 200, must still fork (the limit counts
// processes of the same user, which must not be A's).
func TestUsernsNprocPerSandbox(t *testing.T) {
	s := startServer(t)
	a, b := s.create(t, "base"), s.create(t, "base")
	r := run(t, a, "user", "for i in $(seq 300); do setsid sleep 600 </dev/null >/dev/null 2>&1 & done; "+
		// each child is named sleep only once it has exec'd: wait for all of them (a loaded host is slow)
		"for i in $(seq 150); do [ $(pgrep -c -u user -x sleep) -ge 300 ] && break; sleep 0.2; done; pgrep -c -u user -x sleep")
	if n, _ := strconv.Atoi(strings.TrimSpace(r.Out)); r.Code != 0 || n < 300 {
		t.Fatalf("sandbox A's user runs %q sleeping processes (exit %d)", r.Out, r.Code)
	}
	defer run(t, a, "user", "pkill -u user sleep")
	fork := `python3 -c '
import os, resource
resource.setrlimit(resource.RLIMIT_NPROC, (200, 200))
try:
    pid = os.fork()
except OSError as e:
    print("fork failed:", e)
    raise SystemExit(1)
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
print("forked")
'`
	if r := run(t, b, "user", fork); r.Code != 0 || strings.TrimSpace(r.Out) != "forked" {
		t.Errorf("sandbox B's user cannot fork under RLIMIT_NPROC 200 while sandbox A's user runs 300 processes: %s", r.Out)
	}
}

// TestUsernsMapping: root inside maps to an unprivileged host range of 65536
// ids, distinct per sandbox, and inside everything keeps working as before:
// root is 0, the user is 1000, sudo works, uploads belong to the user.
func TestUsernsMapping(t *testing.T) {
	s := startServer(t)
	a, b := s.create(t, "base"), s.create(t, "base")
	ra, rb := uidRange(t, a), uidRange(t, b)
	if ra[0] == 0 || rb[0] == 0 || ra[1] != 65536 || rb[1] != 65536 {
		t.Fatalf("uid_map first lines: A %v, B %v; want 0 <non-zero host id> 65536", ra, rb)
	}
	if ra[0] < rb[0]+rb[1] && rb[0] < ra[0]+ra[1] {
		t.Fatalf("host ranges overlap: A %v, B %v", ra, rb)
	}
	if r := asRoot(t, a, "diff /proc/self/uid_map /proc/self/gid_map && id -u"); r.Code != 0 || strings.TrimSpace(r.Out) != "0" {
		t.Errorf("root inside: %s", r.Out)
	}
	if r := run(t, a, "user", "id -u && sudo -n id -u"); r.Code != 0 || r.Out != "1000\n0\n" {
		t.Errorf("user and sudo inside: %q (exit %d)", r.Out, r.Code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := a.Files.Write(ctx, "/home/user/uploaded", []byte("x"), nil); err != nil {
		t.Fatal(err)
	}
	if r := asRoot(t, a, "stat -c %U:%G /home/user/uploaded /etc/shadow /usr/bin/sudo"); r.Out != "user:user\nroot:shadow\nroot:root\n" {
		t.Errorf("owners inside: %q", r.Out)
	}
}

// uidRange returns the host id and size of the mapping of uid 0 in sbx.
func uidRange(t *testing.T, sbx *sdk.Sandbox) [2]uint64 {
	t.Helper()
	r := asRoot(t, sbx, "head -1 /proc/self/uid_map")
	f := strings.Fields(r.Out)
	if len(f) != 3 || f[0] != "0" {
		t.Fatalf("uid_map: %q", r.Out)
	}
	host, err1 := strconv.ParseUint(f[1], 10, 32)
	size, err2 := strconv.ParseUint(f[2], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		t.Fatalf("uid_map %q: %v", r.Out, err)
	}
	return [2]uint64{host, size}
}

// TestUsernsHostMountsInert: root in a sandbox writes a setuid-root shell and
// a device node (/dev/null's numbers) into its disk. On the host, every mount
// holding them must neutralise them: no device opens through it (nodev), and
// the shell is either on a nosuid mount or not owned by host root.
func TestUsernsHostMountsInert(t *testing.T) {
	s := startServer(t)
	sbx := s.create(t, "base")
	r := asRoot(t, sbx, "cp /bin/bash /tmp/suidsh && chmod 4755 /tmp/suidsh && (mknod /tmp/nulldev c 1 3 && echo mknod-ok || echo mknod-refused)")
	if r.Code != 0 {
		t.Fatalf("write files: %s", r.Out)
	}
	made := strings.Contains(r.Out, "mknod-ok")
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	var seen int
	for _, m := range mounts {
		if !strings.Contains(m.Point, sbx.ID()) || (m.FSType != "ext4" && m.FSType != "overlay") {
			continue
		}
		for _, dir := range []string{filepath.Join(m.Point, "upper", "tmp"), filepath.Join(m.Point, "tmp")} {
			if _, err := os.Lstat(filepath.Join(dir, "suidsh")); err != nil {
				continue
			}
			seen++
			checkInert(t, m, dir, made)
		}
	}
	if seen == 0 {
		t.Fatalf("the sandbox's files are on no host mount naming %s", sbx.ID())
	}
}

// checkInert checks the shell and device node the sandbox wrote, as seen in
// dir on host mount m.
func checkInert(t *testing.T, m mountinfo.Mount, dir string, deviceMade bool) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join(dir, "suidsh"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode&unix.S_ISUID != 0 && st.Uid == 0 && !m.HasOpt("nosuid") {
		t.Errorf("%s/suidsh is setuid host root on %s %s mounted %q (no nosuid)", dir, m.FSType, m.Point, m.Options)
	}
	if !m.HasOpt("nodev") {
		t.Errorf("%s %s holds what the sandbox wrote and is mounted %q (no nodev)", m.FSType, m.Point, m.Options)
	}
	if !deviceMade {
		return
	}
	f, err := os.OpenFile(filepath.Join(dir, "nulldev"), os.O_WRONLY, 0)
	if err == nil {
		f.Close()
		t.Errorf("the host opened the device node the sandbox made, through %s", m.Point)
	}
}

// TestUsernsOff: with --userns=false root inside is host root again (for hosts
// that need it), sudo still works, and what the sandbox writes is still inert
// on the host: its disk is mounted nosuid,nodev, and its root filesystem (where
// setuid must keep working for sudo) sits in a directory only host root can
// enter.
func TestUsernsOff(t *testing.T) {
	s := startServer(t, "--userns=false")
	sbx := s.create(t, "base")
	if r := asRoot(t, sbx, "head -1 /proc/self/uid_map"); strings.Join(strings.Fields(r.Out), " ") != "0 0 4294967295" {
		t.Errorf("uid_map with --userns=false: %q", r.Out)
	}
	if r := run(t, sbx, "user", "sudo -n id -u"); r.Code != 0 || r.Out != "0\n" {
		t.Errorf("sudo: %q (exit %d)", r.Out, r.Code)
	}
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		t.Fatal(err)
	}
	var layers, overlays int
	for _, m := range mounts {
		switch {
		case !strings.Contains(m.Point, sbx.ID()):
		case m.FSType == "ext4":
			layers++
			if !m.HasOpt("nosuid") || !m.HasOpt("nodev") {
				t.Errorf("disk %s mounted %q, want nosuid,nodev", m.Point, m.Options)
			}
		case m.FSType == "overlay":
			overlays++
			var st unix.Stat_t
			if err := unix.Stat(filepath.Dir(m.Point), &st); err != nil || st.Uid != 0 || st.Mode&0o077 != 0 {
				t.Errorf("root filesystem %s lies in a directory others can enter (mode %o, uid %d, %v)", m.Point, st.Mode&0o777, st.Uid, err)
			}
			if !m.HasOpt("nodev") {
				t.Errorf("root filesystem %s mounted %q, want nodev", m.Point, m.Options)
			}
		}
	}
	if layers != 1 || overlays != 1 {
		t.Fatalf("host mounts of %s: %d disks, %d root filesystems", sbx.ID(), layers, overlays)
	}
}
