package oci

import (
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// deniedSyscalls fail with EPERM inside a sandbox. They reach kernel
// interfaces that are not namespaced (keyrings, modules, kexec, swap, clock,
// accounting, syslog), hand out kernel attack surface that sandboxed code has
// no need for (bpf, userfaultfd, perf events, file handles, raw I/O ports) or
// create namespaces, mounts and root changes; most also need a capability the
// sandbox lacks, so the filter is a second wall, not the only one.
var deniedSyscalls = []string{
	// namespaces and mounts (unshare(CLONE_NEWUSER) needs no capability)
	"unshare", "setns", "mount", "umount", "umount2", "pivot_root",
	"open_tree", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	// keyrings, modules, kexec, reboot
	"add_key", "request_key", "keyctl",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
	// kernel attack surface
	"bpf", "userfaultfd", "perf_event_open", "open_by_handle_at",
	"kcmp", "iopl", "ioperm", "fanotify_init", "lookup_dcookie", "uselib", "vhangup",
	// host-wide state
	"swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd", "settimeofday",
	"clock_settime", "clock_adjtime", "stime", "nfsservctl", "_sysctl", "sysfs", "ustat",
}

// enosysSyscalls fail with ENOSYS, which callers treat as "not available" and
// fall back from: io_uring (a frequent source of kernel bugs; libuv, Tokio and
// liburing users fall back to epoll) and clone3 (whose flags seccomp cannot
// inspect; glibc, Go and Rust fall back to clone, which is filtered below).
var enosysSyscalls = []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"}

// cloneNamespaceFlags are the clone(2) flags that create namespaces; a clone
// with any of them fails with EPERM.
var cloneNamespaceFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
}

// seccompProfile returns the sandbox's seccomp filter (OCI runtime spec
// config-linux.md "Seccomp"): every syscall is allowed except deniedSyscalls
// (EPERM), enosysSyscalls (ENOSYS) and clone with a namespace flag (EPERM).
// The filter covers every ABI of the host architecture (on amd64 also i386
// and x32), so a denied call cannot be reached through another syscall table.
// Runtimes that do not apply OCI seccomp (runsc without --oci-seccomp) ignore it.
func seccompProfile() *specs.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	sc := &specs.LinuxSeccomp{
		DefaultAction: specs.ActAllow,
		Architectures: seccompArches(runtime.GOARCH),
		Syscalls: []specs.LinuxSyscall{
			{Names: deniedSyscalls, Action: specs.ActErrno, ErrnoRet: &eperm},
			{Names: enosysSyscalls, Action: specs.ActErrno, ErrnoRet: &enosys},
		},
	}
	for _, flag := range cloneNamespaceFlags {
		sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{
			Names: []string{"clone"}, Action: specs.ActErrno, ErrnoRet: &eperm,
			Args: []specs.LinuxSeccompArg{{Index: cloneFlagsArg(runtime.GOARCH), Value: flag, ValueTwo: flag, Op: specs.OpMaskedEqual}},
		})
	}
	return sc
}

// seccompArches lists the syscall ABIs a process of goarch can use.
func seccompArches(goarch string) []specs.Arch {
	switch goarch {
	case "amd64":
		return []specs.Arch{specs.ArchX86_64, specs.ArchX86, specs.ArchX32}
	case "arm64":
		return []specs.Arch{specs.ArchAARCH64, specs.ArchARM}
	default:
		return nil // the native ABI only
	}
}

// cloneFlagsArg is the index of clone's flags argument (s390x swaps the first two).
func cloneFlagsArg(goarch string) uint {
	if goarch == "s390x" {
		return 1
	}
	return 0
}
