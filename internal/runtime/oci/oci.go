// Package oci builds the OCI runtime-spec configuration (config.json) of a Cubby
// sandbox and writes it as a bundle. The same bundle runs under runc and gVisor's runsc.
package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// SpecVersion is the ociVersion written into config.json. It is the newest version
// every supported runtime (runc 1.1, runsc) accepts; all fields Build sets exist in it.
const SpecVersion = "1.0.2"

// ConfigName is the file name of the configuration inside a bundle (OCI runtime spec, "bundle").
const ConfigName = "config.json"

// DefaultPath is the PATH given to the process when Options.Env has none.
const DefaultPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// cfsPeriod is the CFS period in µs; the quota is CPUCount times this.
const cfsPeriod = 100000

// DefaultNoFile is the RLIMIT_NOFILE soft and hard limit given to the sandbox
// process when the host allows it (see NoFileCeiling).
const DefaultNoFile = 1048576

// Options describe one sandbox container.
type Options struct {
	ID          string        // container ID; used as the default hostname
	RootfsDir   string        // absolute path of the already mounted root filesystem
	Hostname    string        // UTS hostname; "" = ID
	Args        []string      // argv of the init process, required
	Env         []string      // KEY=value; DefaultPath is added when no PATH is given
	Cwd         string        // absolute working directory; "" = "/"
	NetNSPath   string        // network namespace to join (e.g. /var/run/netns/x); "" = a new one
	CgroupsPath string        // cgroup path relative to the hierarchy roots, e.g. "/cubby/<id>"
	CPUCount    int           // CPUs: CFS quota = CPUCount*100000 µs per 100000 µs; 0 = unlimited
	MemoryBytes int64         // memory limit in bytes, swap forbidden; 0 = unlimited
	PidsLimit   int64         // maximum number of tasks; 0 = unlimited
	NoFile      uint64        // RLIMIT_NOFILE; 0 = min(DefaultNoFile, NoFileCeiling())
	Mounts      []specs.Mount // extra mounts appended after the defaults (binds of agent, /etc/hosts, ...)
	Hooks       *specs.Hooks  // OCI hooks (e.g. createContainer); nil = none
	UserNS      *UserNS       // user namespace of the sandbox; nil = none (uid 0 inside is host root)
}

// UserNS is the user namespace of a sandbox (OCI runtime spec config-linux.md
// "User namespace mappings"): uids and gids 0..Size-1 inside map to host ids
// HostID..HostID+Size-1.
type UserNS struct {
	// Path is a bind-mounted nsfs file of an existing namespace with exactly this
	// mapping, joined by the runtime; the spec then carries no mappings (runc
	// reads them from the namespace and warns when both are given). "" lets the
	// runtime create the namespace from the mapping (its owner is then the
	// runtime's euid, root).
	Path   string
	HostID uint32
	Size   uint32
}

// Build returns the OCI runtime spec for o: root uid 0 with the conventional container
// capability set, NoNewPrivileges false, RLIMIT_NOFILE 1048576 (capped by the host, see
// Options.NoFile and rlimits), the user namespace of Options.UserNS (joined by path, or
// created from its mapping), the standard /proc, /dev, /dev/pts, /dev/shm, /dev/mqueue, /sys (ro) and /sys/fs/cgroup (ro) mounts, masked and
// read-only proc/sys paths, pid, ipc, uts, mount, network and cgroup namespaces
// and a seccomp allowlist that refuses every other syscall, non-namespaced and
// namespace-creating ones first (seccompProfile) (OCI runtime spec config.md and
// config-linux.md). It returns an error when a
// required option is missing or a path is not absolute.
func Build(o Options) (*specs.Spec, error) {
	if err := validate(o); err != nil {
		return nil, err
	}
	hostname := o.Hostname
	if hostname == "" {
		hostname = o.ID
	}
	s := &specs.Spec{
		Version:  SpecVersion,
		Root:     &specs.Root{Path: o.RootfsDir, Readonly: false},
		Process:  process(o),
		Hostname: hostname,
		Mounts:   append(defaultMounts(), o.Mounts...),
		Hooks:    o.Hooks,
		Linux: &specs.Linux{
			CgroupsPath:   o.CgroupsPath,
			Namespaces:    namespaces(o.NetNSPath, o.UserNS),
			Resources:     resources(o),
			MaskedPaths:   maskedPaths(),
			ReadonlyPaths: readonlyPaths(),
			Seccomp:       seccompProfile(),
		},
	}
	if u := o.UserNS; u != nil && u.Path == "" {
		m := []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.HostID, Size: u.Size}}
		s.Linux.UIDMappings, s.Linux.GIDMappings = m, m
	}
	return s, nil
}

func validate(o Options) error {
	switch {
	case o.ID == "":
		return errors.New("oci spec: empty container ID")
	case !filepath.IsAbs(o.RootfsDir):
		return fmt.Errorf("oci spec %s: rootfs %q is not absolute", o.ID, o.RootfsDir)
	case len(o.Args) == 0:
		return fmt.Errorf("oci spec %s: no process args", o.ID)
	case o.Cwd != "" && !filepath.IsAbs(o.Cwd):
		return fmt.Errorf("oci spec %s: cwd %q is not absolute", o.ID, o.Cwd)
	case o.CgroupsPath != "" && !filepath.IsAbs(o.CgroupsPath):
		return fmt.Errorf("oci spec %s: cgroups path %q is not absolute", o.ID, o.CgroupsPath)
	case o.CPUCount < 0 || o.MemoryBytes < 0 || o.PidsLimit < 0:
		return fmt.Errorf("oci spec %s: negative resource limit", o.ID)
	case o.UserNS != nil && (o.UserNS.Size == 0 || o.UserNS.Path != "" && !filepath.IsAbs(o.UserNS.Path)):
		return fmt.Errorf("oci spec %s: user namespace needs a size and an absolute path", o.ID)
	}
	for _, m := range o.Mounts {
		if !filepath.IsAbs(m.Destination) {
			return fmt.Errorf("oci spec %s: mount destination %q is not absolute", o.ID, m.Destination)
		}
	}
	return nil
}

// sandboxCaps is the sandbox's capability set: Docker's conventional default
// set (which lets root inside the sandbox run sudo, chown files and bind low
// ports) without CAP_NET_RAW, so no process in a sandbox can open raw or packet
// sockets (forge frames, ARP or source addresses, or sniff); ping uses ICMP
// datagram sockets instead (net.ipv4.ping_group_range, set by internal/network).
// CAP_NET_BROADCAST is not in it either.
var sandboxCaps = []struct {
	name string
	bit  uint
}{
	{"CAP_CHOWN", unix.CAP_CHOWN}, {"CAP_DAC_OVERRIDE", unix.CAP_DAC_OVERRIDE}, {"CAP_FSETID", unix.CAP_FSETID},
	{"CAP_FOWNER", unix.CAP_FOWNER}, {"CAP_MKNOD", unix.CAP_MKNOD}, {"CAP_SETGID", unix.CAP_SETGID},
	{"CAP_SETUID", unix.CAP_SETUID}, {"CAP_SETFCAP", unix.CAP_SETFCAP}, {"CAP_SETPCAP", unix.CAP_SETPCAP},
	{"CAP_NET_BIND_SERVICE", unix.CAP_NET_BIND_SERVICE}, {"CAP_SYS_CHROOT", unix.CAP_SYS_CHROOT},
	{"CAP_KILL", unix.CAP_KILL}, {"CAP_AUDIT_WRITE", unix.CAP_AUDIT_WRITE},
}

// capabilities returns the names of sandboxCaps, as the OCI spec lists them.
func capabilities() []string {
	names := make([]string, len(sandboxCaps))
	for i, c := range sandboxCaps {
		names[i] = c.name
	}
	return names
}

// GrantedCaps returns the sandbox's capability set (its bounding, effective and
// permitted sets) as a mask of 1<<CAP_* bits (linux/capability.h). A file whose
// capabilities are marked effective and ask for more is refused by execve(2)
// inside a sandbox (capabilities(7): safety checking for capability-dumb
// binaries); template builds remove such file capabilities (internal/template).
func GrantedCaps() uint64 {
	var m uint64
	for _, c := range sandboxCaps {
		m |= 1 << c.bit
	}
	return m
}

func process(o Options) *specs.Process {
	cwd := o.Cwd
	if cwd == "" {
		cwd = "/"
	}
	return &specs.Process{
		Args: append([]string(nil), o.Args...),
		Env:  withPath(o.Env),
		Cwd:  cwd,
		User: specs.User{UID: 0, GID: 0},
		Capabilities: &specs.LinuxCapabilities{
			Bounding:  capabilities(),
			Effective: capabilities(),
			Permitted: capabilities(),
		},
		Rlimits:         rlimits(o),
		NoNewPrivileges: false,
	}
}

// rlimits is RLIMIT_NOFILE at nofile(o), or none when the runtime could not set
// it: a runtime joining a user namespace applies rlimits with prlimit(2) on a
// process of another uid, which needs CAP_SYS_RESOURCE (runc 1.2 and later).
// Without it the sandbox inherits the runtime's own limits (see InheritNoFile).
func rlimits(o Options) []specs.POSIXRlimit {
	if o.UserNS != nil && o.UserNS.Path != "" && !hasCapability(unix.CAP_SYS_RESOURCE) {
		return nil
	}
	return []specs.POSIXRlimit{{Type: "RLIMIT_NOFILE", Hard: nofile(o), Soft: nofile(o)}}
}

// InheritNoFile raises this process's soft RLIMIT_NOFILE to its hard limit
// with syscall.Setrlimit, which also stops os/exec from restoring the original
// soft limit in child processes: runtimes started afterwards, and sandboxes
// that inherit their limits, get the full hard limit. Errors come from
// setrlimit(2).
func InheritNoFile() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("get RLIMIT_NOFILE: %w", err)
	}
	lim.Cur = lim.Max
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("set RLIMIT_NOFILE: %w", err)
	}
	return nil
}

func nofile(o Options) uint64 {
	if o.NoFile > 0 {
		return o.NoFile
	}
	return min(DefaultNoFile, NoFileCeiling())
}

// NoFileCeiling is the highest RLIMIT_NOFILE a runtime started by this process can
// set: fs.nr_open with CAP_SYS_RESOURCE (as a normal root has), otherwise this
// process's own hard limit (some hosts drop CAP_SYS_RESOURCE even for root).
func NoFileCeiling() uint64 {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return DefaultNoFile
	}
	if !hasCapability(unix.CAP_SYS_RESOURCE) {
		return lim.Max
	}
	b, err := os.ReadFile("/proc/sys/fs/nr_open")
	if err != nil {
		return max(lim.Max, DefaultNoFile)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return max(lim.Max, DefaultNoFile)
	}
	return n
}

// hasCapability reports whether capability bit c is in this process's effective set
// (CapEff in /proc/self/status).
func hasCapability(c int) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return err == nil && mask&(1<<uint(c)) != 0
		}
	}
	return false
}

func withPath(env []string) []string {
	out := append([]string(nil), env...)
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			return out
		}
	}
	return append(out, DefaultPath)
}

func defaultMounts() []specs.Mount {
	return []specs.Mount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs",
			Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts",
			Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm",
			Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/dev/mqueue", Type: "mqueue", Source: "mqueue",
			Options: []string{"nosuid", "noexec", "nodev"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs",
			Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/sys/fs/cgroup", Type: "cgroup", Source: "cgroup",
			Options: []string{"nosuid", "noexec", "nodev", "relatime", "ro"}},
	}
}

func namespaces(netns string, user *UserNS) []specs.LinuxNamespace {
	var ns []specs.LinuxNamespace
	if user != nil {
		ns = append(ns, specs.LinuxNamespace{Type: specs.UserNamespace, Path: user.Path})
	}
	return append(ns, []specs.LinuxNamespace{
		{Type: specs.PIDNamespace},
		{Type: specs.IPCNamespace},
		{Type: specs.UTSNamespace},
		{Type: specs.MountNamespace},
		{Type: specs.NetworkNamespace, Path: netns},
		{Type: specs.CgroupNamespace},
	}...)
}

func resources(o Options) *specs.LinuxResources {
	r := &specs.LinuxResources{
		// Deny every device; runtimes add the standard allow list (null, zero, tty, ...).
		Devices: []specs.LinuxDeviceCgroup{{Allow: false, Access: "rwm"}},
	}
	if o.CPUCount > 0 {
		quota, period := int64(o.CPUCount)*cfsPeriod, uint64(cfsPeriod)
		r.CPU = &specs.LinuxCPU{Quota: &quota, Period: &period}
	}
	if o.MemoryBytes > 0 {
		limit, swap := o.MemoryBytes, o.MemoryBytes
		r.Memory = &specs.LinuxMemory{Limit: &limit, Swap: &swap}
	}
	if o.PidsLimit > 0 {
		pids := o.PidsLimit
		r.Pids = &specs.LinuxPids{Limit: &pids}
	}
	return r
}

func maskedPaths() []string {
	return []string{
		"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
		"/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/proc/scsi",
		"/sys/firmware",
	}
}

func readonlyPaths() []string {
	return []string{"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}
}

// WriteBundle creates the bundle directory dir (mode 0700 when missing) and atomically
// writes s to dir/config.json (OCI runtime spec "bundle"). The rootfs named by s.Root
// is not touched. Errors come from marshalling or the filesystem.
func WriteBundle(dir string, s *specs.Spec) error {
	if s == nil {
		return errors.New("write bundle: nil spec")
	}
	data, err := json.MarshalIndent(s, "", "\t")
	if err != nil {
		return fmt.Errorf("write bundle %s: marshal: %w", dir, err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	tmp, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, ConfigName)); err != nil {
		return fmt.Errorf("write bundle %s: %w", dir, err)
	}
	return nil
}
