package security

import (
	"context"
	"fmt"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/testenv/testnetns"
	"github.com/cubby-dev/cubby/sdk"
)

// The escape checks that held before the seccomp allowlist (and must keep
// holding): each is made as root inside a real sandbox.

// TestEscapeKernelInterfacesRefused: root cannot mount, create namespaces,
// join them, load bpf, use keyrings or io_uring; /proc/sys and /sys are
// read-only; the sensitive /proc files are masked.
func TestEscapeKernelInterfacesRefused(t *testing.T) {
	s := startServer(t)
	sbx := s.create(t, "")

	for cmd, why := range map[string]string{
		"mount -t tmpfs none /mnt":                                 "mount",
		"unshare --user --map-root-user true":                      "new user namespace",
		"unshare --mount true":                                     "new mount namespace",
		"unshare --net true":                                       "new network namespace",
		"nsenter --target 1 --mount --net true":                    "join namespaces (setns)",
		"echo 1 > /proc/sys/vm/drop_caches":                        "write to /proc/sys",
		"echo evil > /proc/sys/kernel/hostname":                    "write to /proc/sys (uts)",
		"mount -o remount,rw /proc/sys":                            "remount /proc/sys read-write",
		"echo never > /sys/kernel/mm/transparent_hugepage/enabled": "write to /sys",
		"mount -o remount,rw /sys":                                 "remount /sys read-write",
		"echo c > /proc/sysrq-trigger":                             "sysrq",
	} {
		if res := asRoot(t, sbx, cmd+" 2>&1"); res.Code == 0 {
			t.Errorf("%s: %q succeeded as root: %s", why, cmd, res.Out)
		}
	}
	if runtime.GOARCH == "amd64" {
		calls := []sysCall{
			{"setns", "308,0xffffffff,0", false}, {"bpf", "321,0,0,0", false}, {"keyctl", "250,0,0", false},
			{"add_key", "248,0,0,0,0,0", false}, {"io_uring_setup", "425,1,0", false},
			{"unshare(CLONE_NEWUSER)", "272,0x10000000", false}, {"mount", "165,0,0,0,0,0", false},
		}
		checkSysCalls(t, "x86_64", asRoot(t, sbx, "python3 -c '"+syscallProbePy+"' "+callArgs(calls)), calls)
	}
	// Masked files are /dev/null (char 1:3); masked directories are empty,
	// read-only tmpfs. Paths this kernel lacks are not there at all.
	masked := map[string]string{"/proc/kcore": "1:3", "/proc/keys": "1:3", "/proc/timer_list": "1:3",
		"/proc/sched_debug": "1:3", "/proc/acpi": "tmpfs:0", "/proc/scsi": "tmpfs:0", "/sys/firmware": "tmpfs:0"}
	var script strings.Builder
	for path, want := range masked {
		probe := "$(stat -c %t:%T " + path + ")"
		if want == "tmpfs:0" {
			probe = "$(stat -f -c %T " + path + "):$(ls -A " + path + " | wc -l)"
		}
		fmt.Fprintf(&script, "if [ -e %s ]; then echo \"%s %s\"; else echo '%s missing'; fi\n", path, path, probe, path)
	}
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(asRoot(t, sbx, script.String()).Out), "\n") {
		path, got, _ := strings.Cut(line, " ")
		if want, ok := masked[path]; !ok || (got != want && got != "missing") {
			t.Errorf("%s is not masked: %q, want %q", path, got, want)
		}
		if got != "missing" {
			checked++
		}
	}
	if checked < 3 {
		t.Errorf("only %d of the masked paths exist here", checked)
	}
	s.healthy(t)
}

// TestEscapeHostDeviceRefused: root cannot reach the host's disk through a
// device node. In its user namespace (the default) mknod of a real device is
// refused outright; with --userns=false root may create the node (CAP_MKNOD)
// but the device cgroup refuses to open it.
func TestEscapeHostDeviceRefused(t *testing.T) {
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		t.Fatal(err)
	}
	major, minor := unix.Major(uint64(st.Dev)), unix.Minor(uint64(st.Dev))
	for _, mode := range []struct {
		name string
		args []string
		made bool // whether mknod succeeds
	}{{"userns", nil, false}, {"no-userns", []string{"--userns=false"}, true}} {
		t.Run(mode.name, func(t *testing.T) {
			s := startServer(t, mode.args...)
			sbx := s.create(t, "")
			// In /dev (a tmpfs where devices work): the root filesystem is nodev.
			res := asRoot(t, sbx, fmt.Sprintf(`mknod /dev/hostdisk b %d %d && echo MADE
[ -b /dev/hostdisk ] && head -c 512 /dev/hostdisk > /dev/null && echo READ-HOST-DISK
[ -b /dev/hostdisk ] && echo x > /dev/hostdisk && echo WROTE-HOST-DISK
mknod /dev/xmem c 1 1 && head -c 1 /dev/xmem > /dev/null && echo READ-DEV-MEM`, major, minor))
			if strings.Contains(res.Out, "MADE") != mode.made || !strings.Contains(res.Out, "Operation not permitted") {
				t.Fatalf("mknod as root (want made=%v): %s", mode.made, res.Out)
			}
			if strings.Contains(res.Out, "HOST-DISK") || strings.Contains(res.Out, "DEV-MEM") {
				t.Errorf("host device %d:%d (or /dev/mem) reached from the sandbox: %s", major, minor, res.Out)
			}
		})
	}
}

// TestEscapeNoTCPToNeighbourOrHost: root in one sandbox cannot open a TCP
// connection to another sandbox (its envd, its interpreter, a port it
// listens on as root) nor to the host (a listener on every host address,
// reached through the bridge gateway or the host's own address).
func TestEscapeNoTCPToNeighbourOrHost(t *testing.T) {
	hostPort := testnetns.ClosingListener(t, "0.0.0.0:0").Port
	s := startServer(t)
	a, b := s.create(t, ""), s.create(t, "")
	asRoot(t, b, "setsid nohup python3 -m http.server 8080 >/dev/null 2>&1 &")
	bAddr := strings.TrimSpace(run(t, b, "", `hostname -I | cut -d' ' -f1`).Out)
	gw := strings.TrimSpace(run(t, a, "", `ip route | awk '/default/ {print $3}'`).Out)
	if bAddr == "" || gw == "" {
		t.Fatalf("addresses: b=%q gw=%q", bAddr, gw)
	}
	waitListening(t, b, 8080)
	targets := []string{bAddr + ":49983", bAddr + ":49999", bAddr + ":8080", fmt.Sprintf("%s:%d", gw, hostPort)}
	if ip := hostAddress(t, gw); ip != "" {
		targets = append(targets, fmt.Sprintf("%s:%d", ip, hostPort))
	}
	for _, target := range targets {
		host, port, _ := net.SplitHostPort(target)
		res := asRoot(t, a, fmt.Sprintf(`timeout 3 bash -c 'echo > /dev/tcp/%s/%s' 2>/dev/null && echo open || echo closed`, host, port))
		if strings.TrimSpace(res.Out) != "closed" {
			t.Errorf("sandbox reached %s: %s", target, res.Out)
		}
	}
	if res := run(t, b, "", "curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8080/"); res.Out != "200" {
		t.Errorf("the neighbour's own listener does not answer it: %q", res.Out)
	}
}

// waitListening waits until something listens on TCP port inside sbx.
func waitListening(t *testing.T, sbx *sdk.Sandbox, port int) {
	t.Helper()
	for range 50 {
		if res := run(t, sbx, "", fmt.Sprintf("ss -ltn | grep -q ':%d ' && echo up", port)); strings.Contains(res.Out, "up") {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("nothing listens on port %d in %s", port, sbx.ID())
}

// hostAddress returns an IPv4 address of the host outside the sandboxes'
// subnet (that of gw) and loopback, or "" when there is none.
func hostAddress(t *testing.T, gw string) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	gwIP := net.ParseIP(gw)
	for _, a := range addrs {
		n, ok := a.(*net.IPNet)
		if !ok || n.IP.To4() == nil || n.IP.IsLoopback() || n.Contains(gwIP) {
			continue
		}
		return n.IP.String()
	}
	return ""
}

// TestEscapeLimitsContainHogs: a memory hog run as root is stopped by the
// sandbox's memory limit and a fork bomb by its PID limit, while a neighbour
// keeps working and the bombed sandbox can still be killed promptly.
func TestEscapeLimitsContainHogs(t *testing.T) {
	s := startServer(t)
	a, b := s.create(t, ""), s.create(t, "")

	res := asRoot(t, a, `python3 -c 'x = bytearray(4 << 30)' 2>&1; echo "exit=$?"`)
	if !strings.Contains(res.Out, "exit=137") && !strings.Contains(res.Out, "MemoryError") {
		t.Errorf("memory hog not stopped by the sandbox limit: %q", res.Out)
	}
	if res := run(t, a, "", "echo back"); res.Out != "back\n" {
		t.Fatalf("sandbox unusable after its memory hog: %+v", res)
	}
	asRoot(t, a, `setsid nohup bash -c ':(){ :|:& };:' >/dev/null 2>&1 &`)
	time.Sleep(3 * time.Second)
	if res := run(t, b, "", "echo alive"); res.Out != "alive\n" {
		t.Fatalf("neighbour disturbed by the fork bomb: %+v", res)
	}
	s.healthy(t)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := a.Kill(ctx); err != nil {
		t.Fatalf("kill the fork-bombed sandbox: %v", err)
	}
	t.Logf("fork-bombed sandbox killed in %v", time.Since(start))
	if res := run(t, b, "", "echo alive"); res.Out != "alive\n" {
		t.Fatalf("neighbour disturbed after the kill: %+v", res)
	}
}
