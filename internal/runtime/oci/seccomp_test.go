package oci

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// decisions is what a filter does with a call regardless of its arguments:
// allowed, or the errno it fails with.
type decisions struct {
	allowed map[string]bool
	errno   map[string]uint
}

func plainRules(t *testing.T, sc *specs.LinuxSeccomp) decisions {
	d := decisions{allowed: map[string]bool{}, errno: map[string]uint{}}
	for _, r := range sc.Syscalls {
		if len(r.Args) > 0 {
			continue
		}
		for _, n := range r.Names {
			if _, dup := d.errno[n]; dup || d.allowed[n] {
				t.Errorf("%s is named by two rules", n)
			}
			switch {
			case r.Action == specs.ActAllow:
				d.allowed[n] = true
			case r.Action == specs.ActErrno && r.ErrnoRet != nil:
				d.errno[n] = *r.ErrnoRet
			default:
				t.Errorf("rule %v: action %s", r.Names, r.Action)
			}
		}
	}
	return d
}

// TestSeccompAllowlist checks the filter's shape as runc reads it: default
// ENOSYS on every amd64 ABI, the calls of a normal program allowed, the
// explicit denials EPERM. Its effect is checked inside real sandboxes by
// test/security (seccomp_test.go, escape_test.go).
func TestSeccompAllowlist(t *testing.T) {
	s, err := Build(options())
	if err != nil {
		t.Fatal(err)
	}
	sc := s.Linux.Seccomp
	if sc == nil || sc.DefaultAction != specs.ActErrno || sc.DefaultErrnoRet == nil || *sc.DefaultErrnoRet != uint(unix.ENOSYS) {
		t.Fatalf("seccomp default = %+v, want errno ENOSYS", sc)
	}
	if got := seccompArches("amd64"); !slices.Equal(got, []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}) {
		t.Errorf("amd64 ABIs = %v", got)
	}
	d := plainRules(t, sc)
	for _, n := range []string{"read", "write", "openat", "mmap", "execve", "fork", "wait4", "futex", "epoll_pwait",
		"connect", "sendmsg", "ptrace", "chroot", "mknod", "setresuid", "name_to_handle_at", "statx", "rseq",
		"mmap2", "_llseek", "fcntl64", "futex_time64", "set_thread_area"} {
		if !d.allowed[n] {
			t.Errorf("%s is not allowed", n)
		}
	}
	denied := []string{"unshare", "setns", "mount", "umount2", "pivot_root", "keyctl", "add_key", "bpf",
		"open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
		"listmount", "statmount", "file_getattr", "file_setattr", "perf_event_open", "userfaultfd",
		"open_by_handle_at", "kexec_load", "init_module", "clock_settime", "socketcall"}
	for _, n := range denied {
		if d.errno[n] != uint(unix.EPERM) {
			t.Errorf("%s: errno %d, want EPERM", n, d.errno[n])
		}
	}
	for _, n := range []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"} {
		if d.allowed[n] || (d.errno[n] != 0 && d.errno[n] != uint(unix.ENOSYS)) {
			t.Errorf("%s is not ENOSYS", n)
		}
	}
	for _, n := range []string{"clone", "personality", "socket", "socketpair", "kcmp", "migrate_pages", "sethostname"} {
		if d.allowed[n] {
			t.Errorf("%s is allowed without a condition", n)
		}
	}
}

// TestSeccompArgumentRules checks the rules that look at an argument: they
// mask it to what the kernel reads and come after the unconditional rules
// (socketcall's denial must precede the socket rules libseccomp copies onto it).
func TestSeccompArgumentRules(t *testing.T) {
	sc := seccompProfile()
	firstArg := slices.IndexFunc(sc.Syscalls, func(r specs.LinuxSyscall) bool { return len(r.Args) > 0 })
	type key struct {
		name  string
		value uint64
	}
	allow, eperm := map[key]bool{}, map[key]bool{}
	for i, r := range sc.Syscalls {
		if len(r.Args) == 0 {
			if i > firstArg {
				t.Errorf("unconditional rule %v after an argument rule", r.Names)
			}
			continue
		}
		a := r.Args[0]
		if len(r.Names) != 1 || len(r.Args) != 1 || a.Op != specs.OpMaskedEqual || a.Index != 0 {
			t.Fatalf("argument rule %+v", r)
		}
		if r.Names[0] != "clone" && a.Value != low32 {
			t.Errorf("%s rule masks %#x, want the low 32 bits", r.Names[0], a.Value)
		}
		k := key{r.Names[0], a.ValueTwo}
		if r.Names[0] == "clone" {
			k.value = a.Value
		}
		if r.Action == specs.ActAllow {
			allow[k] = true
		} else if r.ErrnoRet != nil && *r.ErrnoRet == uint(unix.EPERM) {
			eperm[k] = true
		}
	}
	if !allow[key{"clone", 0x7e020000}] {
		t.Error("clone without namespace flags is not allowed (mask 0x7e020000)")
	}
	for _, f := range []uint64{unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
		unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET} {
		if !eperm[key{"clone", f}] {
			t.Errorf("clone with flag %#x is not EPERM", f)
		}
	}
	for _, p := range []uint64{0, 8, 0x20000, 0x20008, 0xffffffff} {
		if !allow[key{"personality", p}] {
			t.Errorf("persona %#x not allowed", p)
		}
	}
	for _, p := range []uint64{0x0040000, 0x0400000, 0x0040008} { // ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC
		if allow[key{"personality", p}] {
			t.Errorf("persona %#x allowed", p)
		}
	}
	for _, f := range []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
		if !allow[key{"socket", f}] {
			t.Errorf("socket family %d not allowed", f)
		}
	}
	for _, f := range []uint64{unix.AF_VSOCK, unix.AF_PACKET} {
		if allow[key{"socket", f}] || !eperm[key{"socket", f}] {
			t.Errorf("socket family %d is not EPERM", f)
		}
	}
	if allow[key{"socket", unix.AF_ALG}] {
		t.Error("AF_ALG is allowed")
	}
	if !allow[key{"socketpair", unix.AF_UNIX}] || len(allow)+len(eperm) != 1+7+5+4+2+1 {
		t.Errorf("argument rules: allow %v eperm %v", allow, eperm)
	}
}

// TestSeccompNamesExist checks every name of the filter against the kernel's
// syscall tables of amd64 and i386 (golang.org/x/sys/unix zsysnum_linux_*.go):
// runc skips names it cannot resolve, so a misspelt allowed call would fail
// with ENOSYS and a misspelt denial would fall to the default.
func TestSeccompNamesExist(t *testing.T) {
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "golang.org/x/sys").Output()
	if err != nil {
		t.Skipf("golang.org/x/sys source not found: %v", err)
	}
	known := map[string]bool{}
	re := regexp.MustCompile(`^\s*SYS_([A-Z0-9_]+)\s*=`)
	for _, arch := range []string{"amd64", "386"} {
		f, err := os.Open(filepath.Join(strings.TrimSpace(string(out)), "unix", "zsysnum_linux_"+arch+".go"))
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				known[strings.ToLower(m[1])] = true
			}
		}
		f.Close()
	}
	for _, r := range seccompProfile().Syscalls {
		for _, n := range r.Names {
			if !known[n] {
				t.Errorf("%s is in no syscall table of amd64 or i386", n)
			}
		}
	}
}
