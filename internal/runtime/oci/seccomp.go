package oci

import (
	"runtime"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// The sandbox's seccomp filter is an allowlist: a syscall reaches the kernel only
// when it is named below (on every ABI of the host, see seccompArches). Anything
// else fails with ENOSYS, the answer of a kernel that lacks the call, so libcs
// and runtimes fall back from calls newer than this list. The calls chosen are
// those the conventional container default profiles (Docker's, containerd's)
// let through, grouped here by what they are for; the kernel's syscall tables
// (golang.org/x/sys/unix zsysnum_linux_*.go) are the source of the names.
//
// Names that the seccomp library of the OCI runtime does not know are skipped
// by runc (libseccomp 2.5.4 knows syscalls up to futex_requeue, 456): an
// allowed call it does not know gets ENOSYS, a denied one gets ENOSYS instead
// of EPERM. Either way it does not reach the kernel.
var allowedSyscalls = [][]string{
	// processes and threads (clone, socket and personality have argument rules below)
	{"execve", "execveat", "exit", "exit_group", "fork", "vfork", "wait4", "waitid", "waitpid",
		"kill", "tkill", "tgkill", "pidfd_open", "pidfd_send_signal", "pidfd_getfd",
		"set_tid_address", "set_robust_list", "get_robust_list", "rseq", "restart_syscall",
		"arch_prctl", "set_thread_area", "get_thread_area", "modify_ldt", "map_shadow_stack",
		"prctl", "seccomp", "ptrace", "process_vm_readv", "process_vm_writev", "landlock_create_ruleset",
		"landlock_add_rule", "landlock_restrict_self"},
	// identity, capabilities and limits (changes still need the capability)
	{"getpid", "getppid", "gettid", "getpgid", "setpgid", "getpgrp", "getsid", "setsid",
		"getuid", "geteuid", "getgid", "getegid", "getresuid", "getresgid", "getgroups",
		"setuid", "setgid", "setreuid", "setregid", "setresuid", "setresgid", "setgroups", "setfsuid", "setfsgid",
		"getuid32", "geteuid32", "getgid32", "getegid32", "getresuid32", "getresgid32", "getgroups32",
		"setuid32", "setgid32", "setreuid32", "setregid32", "setresuid32", "setresgid32", "setgroups32",
		"setfsuid32", "setfsgid32", "capget", "capset",
		"getrlimit", "ugetrlimit", "setrlimit", "prlimit64", "getrusage", "times", "umask", "uname", "sysinfo"},
	// scheduling, priorities, NUMA policy of the caller's own memory
	{"sched_yield", "sched_getaffinity", "sched_setaffinity", "sched_getparam", "sched_setparam",
		"sched_getscheduler", "sched_setscheduler", "sched_get_priority_max", "sched_get_priority_min",
		"sched_rr_get_interval", "sched_rr_get_interval_time64", "sched_getattr", "sched_setattr",
		"getpriority", "setpriority", "ioprio_get", "ioprio_set", "getcpu",
		"get_mempolicy", "set_mempolicy", "mbind", "set_mempolicy_home_node"},
	// signals
	{"rt_sigaction", "rt_sigprocmask", "rt_sigreturn", "rt_sigpending", "rt_sigsuspend",
		"rt_sigtimedwait", "rt_sigtimedwait_time64", "rt_sigqueueinfo", "rt_tgsigqueueinfo",
		"sigaltstack", "sigreturn", "sigprocmask", "signalfd", "signalfd4", "pause"},
	// memory
	{"brk", "mmap", "mmap2", "munmap", "mremap", "mprotect", "madvise", "msync", "mincore",
		"mlock", "mlock2", "munlock", "mlockall", "munlockall", "membarrier", "memfd_create", "memfd_secret",
		"pkey_alloc", "pkey_free", "pkey_mprotect", "mseal", "remap_file_pages", "process_madvise", "process_mrelease"},
	// time and timers (reading clocks; setting them is denied below)
	{"clock_gettime", "clock_gettime64", "clock_getres", "clock_getres_time64", "clock_nanosleep",
		"clock_nanosleep_time64", "gettimeofday", "time", "nanosleep", "adjtimex", "alarm",
		"getitimer", "setitimer", "timer_create", "timer_delete", "timer_getoverrun", "timer_gettime",
		"timer_gettime64", "timer_settime", "timer_settime64", "timerfd_create", "timerfd_gettime",
		"timerfd_gettime64", "timerfd_settime", "timerfd_settime64"},
	// file descriptors, I/O and polling
	{"read", "write", "readv", "writev", "pread64", "pwrite64", "preadv", "pwritev", "preadv2", "pwritev2",
		"lseek", "_llseek", "close", "close_range", "dup", "dup2", "dup3", "fcntl", "fcntl64", "ioctl", "flock",
		"pipe", "pipe2", "splice", "tee", "vmsplice", "sendfile", "sendfile64", "copy_file_range",
		"select", "_newselect", "pselect6", "pselect6_time64", "poll", "ppoll", "ppoll_time64",
		"epoll_create", "epoll_create1", "epoll_ctl", "epoll_wait", "epoll_pwait", "epoll_pwait2",
		"eventfd", "eventfd2", "inotify_init", "inotify_init1", "inotify_add_watch", "inotify_rm_watch",
		"io_setup", "io_destroy", "io_submit", "io_cancel", "io_getevents", "io_pgetevents", "io_pgetevents_time64",
		"futex", "futex_time64", "futex_waitv", "futex_wake", "futex_wait", "futex_requeue", "getrandom"},
	// files and directories
	{"open", "openat", "openat2", "creat", "stat", "fstat", "lstat", "newfstatat", "statx",
		"stat64", "fstat64", "lstat64", "fstatat64", "statfs", "fstatfs", "statfs64", "fstatfs64",
		"access", "faccessat", "faccessat2", "getcwd", "chdir", "fchdir", "chroot", "getdents", "getdents64",
		"mkdir", "mkdirat", "rmdir", "rename", "renameat", "renameat2", "link", "linkat", "unlink", "unlinkat",
		"symlink", "symlinkat", "readlink", "readlinkat", "mknod", "mknodat",
		"chmod", "fchmod", "fchmodat", "fchmodat2", "chown", "fchown", "lchown", "fchownat",
		"chown32", "fchown32", "lchown32", "truncate", "ftruncate", "truncate64", "ftruncate64",
		"fallocate", "fadvise64", "fadvise64_64", "readahead", "cachestat",
		"fsync", "fdatasync", "sync", "syncfs", "sync_file_range",
		"utime", "utimes", "utimensat", "utimensat_time64", "futimesat", "name_to_handle_at",
		"setxattr", "lsetxattr", "fsetxattr", "getxattr", "lgetxattr", "fgetxattr",
		"listxattr", "llistxattr", "flistxattr", "removexattr", "lremovexattr", "fremovexattr",
		"setxattrat", "getxattrat", "listxattrat", "removexattrat"},
	// sockets (socket and socketpair have argument rules below)
	{"bind", "connect", "listen", "accept", "accept4", "getsockname", "getpeername",
		"getsockopt", "setsockopt", "shutdown", "sendto", "recvfrom", "sendmsg", "recvmsg",
		"sendmmsg", "recvmmsg", "recvmmsg_time64"},
	// System V and POSIX IPC (namespaced per sandbox)
	{"ipc", "shmget", "shmat", "shmdt", "shmctl", "semget", "semop", "semtimedop", "semtimedop_time64",
		"semctl", "msgget", "msgsnd", "msgrcv", "msgctl", "mq_open", "mq_unlink", "mq_timedsend",
		"mq_timedsend_time64", "mq_timedreceive", "mq_timedreceive_time64", "mq_notify", "mq_getsetattr"},
}

// deniedSyscalls fail with EPERM inside a sandbox. They reach kernel
// interfaces that are not namespaced (keyrings, modules, kexec, swap, clock,
// accounting, syslog), hand out kernel attack surface that sandboxed code has
// no need for (bpf, userfaultfd, perf events, file handles, raw I/O ports) or
// create namespaces, mounts and root changes; most also need a capability the
// sandbox lacks, so the filter is a second wall, not the only one. Not being in
// allowedSyscalls would refuse them too (ENOSYS); EPERM says "refused".
var deniedSyscalls = []string{
	// namespaces and mounts (unshare(CLONE_NEWUSER) needs no capability), the new
	// mount API and mount listings
	"unshare", "setns", "mount", "umount", "umount2", "pivot_root",
	"open_tree", "open_tree_attr", "move_mount", "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr",
	"listmount", "statmount",
	// inode attributes of the filesystem (FS_IOC_FSSETXATTR as a syscall)
	"file_getattr", "file_setattr",
	// keyrings, modules, kexec, reboot
	"add_key", "request_key", "keyctl",
	"init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
	// kernel attack surface
	"bpf", "userfaultfd", "perf_event_open", "open_by_handle_at",
	"kcmp", "iopl", "ioperm", "fanotify_init", "lookup_dcookie", "uselib", "vhangup",
	// host-wide state
	"swapon", "swapoff", "acct", "syslog", "quotactl", "quotactl_fd", "settimeofday",
	"clock_settime", "clock_settime64", "clock_adjtime", "clock_adjtime64", "stime",
	"nfsservctl", "_sysctl", "sysfs", "ustat",
	// i386's multiplexed socket call passes the address family behind a pointer
	// seccomp cannot read; 32-bit programs use the direct socket calls (socket,
	// connect, ...), filtered like the 64-bit ones. libseccomp turns every rule on
	// a socket call into a socketcall rule for i386 as well, and a rule with no
	// condition outweighs those, so this one must come before argumentRules.
	"socketcall",
}

// enosysSyscalls fail with ENOSYS, which callers treat as "not available" and
// fall back from: io_uring (a frequent source of kernel bugs; libuv, Tokio and
// liburing users fall back to epoll) and clone3 (whose flags seccomp cannot
// inspect; glibc, Go and Rust fall back to clone, which is filtered below).
// The default action gives them ENOSYS too; they are named to keep it so.
var enosysSyscalls = []string{"io_uring_setup", "io_uring_enter", "io_uring_register", "clone3"}

// cloneNamespaceFlags are the clone(2) flags that create namespaces; a clone
// with any of them fails with EPERM, one without them is allowed.
var cloneNamespaceFlags = []uint64{
	unix.CLONE_NEWNS, unix.CLONE_NEWCGROUP, unix.CLONE_NEWUTS, unix.CLONE_NEWIPC,
	unix.CLONE_NEWUSER, unix.CLONE_NEWPID, unix.CLONE_NEWNET,
}

// allowedPersonas are the personality(2) arguments allowed: the Linux persona,
// its 32-bit variant, UNAME26 with either, and 0xffffffff (query only). Other
// personas (ADDR_NO_RANDOMIZE, READ_IMPLIES_EXEC, foreign ABIs) get ENOSYS: an
// OCI filter cannot say "none of these values" for one argument.
var allowedPersonas = []uint64{perLinux, perLinux32, uname26, uname26 | perLinux32, personaQuery}

// Personas of personality(2) (linux/personality.h).
const (
	perLinux     = 0x0000000
	perLinux32   = 0x0000008
	uname26      = 0x0020000
	personaQuery = 0xffffffff
)

// allowedSocketFamilies are the address families socket(2) may create: local,
// IPv4, IPv6 and netlink (ip, getifaddrs). deniedSocketFamilies fail with
// EPERM: AF_VSOCK (on a host with a vsock device the sandbox would talk to its
// hypervisor) and AF_PACKET (sandboxes lack CAP_NET_RAW); every other family
// gets ENOSYS. socketpair(2) is allowed for AF_UNIX only.
var (
	allowedSocketFamilies = []uint64{unix.AF_UNIX, unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK}
	deniedSocketFamilies  = []uint64{unix.AF_VSOCK, unix.AF_PACKET}
)

// low32 masks an int argument: the kernel reads only the low 32 bits of it, so
// a filter comparing all 64 could be passed by setting the high ones.
const low32 = 0xffffffff

// seccompProfile returns the sandbox's seccomp filter (OCI runtime spec
// config-linux.md "Seccomp"): an allowlist (allowedSyscalls and the argument
// rules of argumentRules) with ENOSYS as the default action, deniedSyscalls
// failing with EPERM and enosysSyscalls with ENOSYS. The filter covers every
// ABI of the host architecture (on amd64 also i386 and x32), so a call cannot
// be reached through another syscall table. Runtimes that do not apply OCI
// seccomp ignore it: gVisor's runsc (without --oci-seccomp) serves every call
// from its own kernel, the sentry, which is the boundary there.
func seccompProfile() *specs.LinuxSeccomp {
	eperm, enosys := uint(unix.EPERM), uint(unix.ENOSYS)
	sc := &specs.LinuxSeccomp{
		DefaultAction:   specs.ActErrno,
		DefaultErrnoRet: &enosys,
		Architectures:   seccompArches(runtime.GOARCH),
	}
	for _, names := range allowedSyscalls {
		sc.Syscalls = append(sc.Syscalls, specs.LinuxSyscall{Names: names, Action: specs.ActAllow})
	}
	sc.Syscalls = append(sc.Syscalls,
		specs.LinuxSyscall{Names: deniedSyscalls, Action: specs.ActErrno, ErrnoRet: &eperm},
		specs.LinuxSyscall{Names: enosysSyscalls, Action: specs.ActErrno, ErrnoRet: &enosys})
	sc.Syscalls = append(sc.Syscalls, argumentRules(runtime.GOARCH)...)
	return sc
}

// argumentRules are the rules that look at an argument: clone's flags,
// personality's persona and the families of socket and socketpair. Each rule
// has one condition; rules naming the same call are alternatives (runc adds
// them one by one, and joins conditions on one argument with "or").
func argumentRules(goarch string) []specs.LinuxSyscall {
	eperm := uint(unix.EPERM)
	var nsMask uint64
	for _, f := range cloneNamespaceFlags {
		nsMask |= f
	}
	flags := cloneFlagsArg(goarch)
	rules := []specs.LinuxSyscall{argRule("clone", nil, flags, nsMask, 0)}
	for _, f := range cloneNamespaceFlags {
		rules = append(rules, argRule("clone", &eperm, flags, f, f))
	}
	for _, p := range allowedPersonas {
		rules = append(rules, argRule("personality", nil, 0, low32, p))
	}
	for _, f := range allowedSocketFamilies {
		rules = append(rules, argRule("socket", nil, 0, low32, f))
	}
	for _, f := range deniedSocketFamilies {
		rules = append(rules, argRule("socket", &eperm, 0, low32, f))
	}
	return append(rules, argRule("socketpair", nil, 0, low32, unix.AF_UNIX))
}

// argRule is a rule for call name that applies when (argument index & mask) ==
// value: it allows the call when errno is nil and fails it with *errno otherwise.
func argRule(name string, errno *uint, index uint, mask, value uint64) specs.LinuxSyscall {
	r := specs.LinuxSyscall{Names: []string{name}, Action: specs.ActAllow,
		Args: []specs.LinuxSeccompArg{{Index: index, Value: mask, ValueTwo: value, Op: specs.OpMaskedEqual}}}
	if errno != nil {
		r.Action, r.ErrnoRet = specs.ActErrno, errno
	}
	return r
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
