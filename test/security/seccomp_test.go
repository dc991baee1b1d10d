package security

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/sdk"
)

// sysCall is one probe of the seccomp filter: label=nr[,args] as sysprobe and
// syscallProbePy take it, and whether the call must reach the kernel (allowed)
// or be refused with EPERM or ENOSYS before it does.
type sysCall struct {
	label, spec string
	allowed     bool
}

// atFDCWD is AT_FDCWD (-100) as a 64-bit and as a 32-bit register value.
const (
	atFDCWD64 = "0xffffffffffffff9c"
	atFDCWD32 = "0xffffff9c"
)

// x86_64 syscall numbers (golang.org/x/sys/unix zsysnum_linux_amd64.go). The
// arguments make the kernel answer with something else than EPERM or ENOSYS
// (EFAULT, EBADF, success) when a call gets through.
var seccompCalls64 = []sysCall{
	{"mount", "165", false}, {"umount2", "166", false}, {"unshare", "272,0x10000000", false},
	{"setns", "308,0xffffffff,0", false}, {"keyctl", "250,0,0", false}, {"add_key", "248", false},
	{"bpf", "321", false}, {"perf_event_open", "298", false}, {"userfaultfd", "323", false},
	{"open_tree", "428," + atFDCWD64 + ",0,0", false}, {"open_tree_attr", "467," + atFDCWD64 + ",0,0,0,0", false},
	{"move_mount", "429", false}, {"fsopen", "430", false}, {"fsconfig", "431,0xffffffff", false},
	{"fsmount", "432,0xffffffff", false}, {"fspick", "433," + atFDCWD64 + ",0,0", false},
	{"mount_setattr", "442," + atFDCWD64 + ",0,0,0,0", false},
	{"listmount", "458,0,0,0,0", false}, {"statmount", "457,0,0,0,0", false},
	{"file_getattr", "468," + atFDCWD64 + ",0,0,0,0", false}, {"file_setattr", "469," + atFDCWD64 + ",0,0,0,0", false},
	{"io_uring_setup", "425,1,0", false}, {"clone3", "435,0,0", false},
	{"personality(ADDR_NO_RANDOMIZE)", "135,0x0040000", false},
	{"personality(READ_IMPLIES_EXEC)", "135,0x0400000", false},
	{"personality(PER_BSD)", "135,0x6", false},
	{"socket(AF_VSOCK)", "41,40,1,0", false},
	{"socket(AF_VSOCK|1<<32)", "41,0x100000028,1,0", false},
	{"socket(AF_ALG)", "41,38,5,0", false}, {"socket(AF_PACKET)", "41,17,3,0x300", false},
	// Ordinary calls keep working.
	{"getpid", "39", true}, {"personality(query)", "135,0xffffffff", true}, {"personality(PER_LINUX)", "135,0", true},
	{"socket(AF_INET)", "41,2,1,0", true}, {"socket(AF_UNIX)", "41,1,1,0", true},
	{"socket(AF_NETLINK)", "41,16,3,0", true},
}

// i386 syscall numbers (zsysnum_linux_386.go), made with int 0x80.
var seccompCalls386 = []sysCall{
	{"mount", "21", false}, {"unshare", "310,0x10000000", false}, {"keyctl", "288,0,0", false},
	{"bpf", "357", false}, {"open_tree_attr", "467," + atFDCWD32 + ",0,0,0,0", false},
	{"listmount", "458,0,0,0,0", false}, {"statmount", "457,0,0,0,0", false},
	{"personality(ADDR_NO_RANDOMIZE)", "136,0x0040000", false},
	{"socket(AF_VSOCK)", "359,40,1,0", false}, {"socketcall-socket", "40", false},
	{"io_uring_setup", "425,1,0", false}, {"clone3", "435,0,0", false},
	{"getpid", "20", true}, {"socket(AF_INET)", "359,2,1,0", true},
}

// syscallProbePy is sysprobe in python3 with ctypes (the x86_64 ABI through
// libc's syscall(2)); every argument is passed as a 64-bit long.
const syscallProbePy = `
import ctypes, errno, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
for a in sys.argv[1:]:
    label, spec = a.split("=", 1)
    v = [ctypes.c_long(int(x, 0) - (1 << 64) if int(x, 0) >= 1 << 63 else int(x, 0)) for x in spec.split(",")]
    ctypes.set_errno(0)
    r = libc.syscall(*v)
    e = ctypes.get_errno()
    print(label, "OK" if r != -1 else errno.errorcode.get(e, "errno %d" % e))
`

// TestSeccompRefusesAsRoot: root inside a sandbox cannot reach the calls the
// seccomp allowlist leaves out or denies (new mount API, mount listings,
// file_getattr/file_setattr, unsafe personas, AF_VSOCK and exotic socket
// families, namespaces, keyrings, bpf, io_uring), neither through the x86_64
// ABI nor through i386's int 0x80 (including i386's socketcall), while
// ordinary calls keep working.
func TestSeccompRefusesAsRoot(t *testing.T) {
	if runtime.GOARCH != "amd64" {
		t.Skip("syscall numbers are amd64's and i386's")
	}
	probe386 := buildSysprobe386(t)
	s := startServer(t)
	sbx := s.create(t, "")

	res := asRoot(t, sbx, "python3 -c '"+syscallProbePy+"' "+callArgs(seccompCalls64))
	checkSysCalls(t, "x86_64", res, seccompCalls64)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := sbx.Files.Write(ctx, "/tmp/sysprobe386", probe386, &sdk.WriteOptions{User: "root"}); err != nil {
		t.Fatal(err)
	}
	res = asRoot(t, sbx, "chmod 755 /tmp/sysprobe386 && /tmp/sysprobe386 "+callArgs(seccompCalls386))
	checkSysCalls(t, "i386", res, seccompCalls386)

	res = asRoot(t, sbx, `python3 -c 'import socket; socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); print("vsock socket created")' 2>&1`)
	if res.Code == 0 || strings.Contains(res.Out, "created") || !strings.Contains(res.Out, "PermissionError") {
		t.Errorf("python AF_VSOCK socket as root: exit %d: %s", res.Code, res.Out)
	}
	s.healthy(t)
}

// buildSysprobe386 builds testdata/sysprobe for GOARCH=386 (static).
func buildSysprobe386(t *testing.T) []byte {
	t.Helper()
	out := filepath.Join(t.TempDir(), "sysprobe386")
	cmd := exec.Command("go", "build", "-o", out, "./testdata/sysprobe")
	cmd.Env = append(os.Environ(), "GOARCH=386", "CGO_ENABLED=0")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build sysprobe for i386: %v\n%s", err, msg)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func callArgs(calls []sysCall) string {
	args := make([]string, 0, len(calls))
	for _, c := range calls {
		args = append(args, "'"+c.label+"="+c.spec+"'")
	}
	return strings.Join(args, " ")
}

// checkSysCalls checks the probe's "<label> <result>" lines against calls.
func checkSysCalls(t *testing.T, abi string, res result, calls []sysCall) {
	t.Helper()
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(res.Out), "\n") {
		if label, r, ok := strings.Cut(line, " "); ok {
			got[label] = r
		}
	}
	for _, c := range calls {
		r, ok := got[c.label]
		refused := r == "EPERM" || r == "ENOSYS"
		switch {
		case !ok:
			t.Errorf("%s %s: no result (exit %d):\n%s", abi, c.label, res.Code, res.Out)
		case c.allowed && r != "OK":
			t.Errorf("%s %s: %s, want OK", abi, c.label, r)
		case !c.allowed && !refused:
			t.Errorf("%s %s as root: %s, want EPERM or ENOSYS (the call reached the kernel)", abi, c.label, r)
		}
	}
}
