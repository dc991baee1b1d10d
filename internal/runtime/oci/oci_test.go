package oci

import (
	"encoding/json"
	"math/bits"
	"os"
	"path/filepath"
	"slices"
	"testing"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

func options() Options {
	return Options{
		ID:          "sbx1",
		RootfsDir:   "/var/lib/cubby/sbx1/rootfs",
		Args:        []string{"/usr/bin/agent", "--port", "49983"},
		Env:         []string{"LANG=C.UTF-8"},
		NetNSPath:   "/var/run/netns/sbx1",
		CgroupsPath: "/cubby/sbx1",
		CPUCount:    2,
		MemoryBytes: 512 << 20,
		PidsLimit:   1024,
		Mounts: []specs.Mount{{Destination: "/etc/hosts", Type: "bind", Source: "/x/hosts",
			Options: []string{"rbind", "ro"}}},
	}
}

func TestBuild(t *testing.T) {
	s, err := Build(options())
	if err != nil {
		t.Fatal(err)
	}
	if s.Root.Path != "/var/lib/cubby/sbx1/rootfs" || s.Root.Readonly || s.Hostname != "sbx1" {
		t.Errorf("root %+v hostname %q", s.Root, s.Hostname)
	}
	p := s.Process
	if p.User.UID != 0 || p.User.GID != 0 || p.NoNewPrivileges || p.Cwd != "/" || p.Terminal {
		t.Errorf("process %+v", p)
	}
	if !slices.Contains(p.Env, DefaultPath) || !slices.Contains(p.Env, "LANG=C.UTF-8") {
		t.Errorf("env %v", p.Env)
	}
	for _, c := range []string{"CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_NET_BIND_SERVICE", "CAP_KILL"} {
		if !slices.Contains(p.Capabilities.Bounding, c) || !slices.Contains(p.Capabilities.Effective, c) ||
			!slices.Contains(p.Capabilities.Permitted, c) {
			t.Errorf("capability %s missing", c)
		}
	}
	for _, c := range []string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_NET_BROADCAST"} {
		if slices.Contains(p.Capabilities.Bounding, c) {
			t.Errorf("%s granted", c)
		}
	}
	if got := GrantedCaps(); got&(1<<unix.CAP_NET_RAW) != 0 || got&(1<<unix.CAP_SETUID) == 0 || bits.OnesCount64(got) != len(p.Capabilities.Bounding) {
		t.Errorf("GrantedCaps = %#x for bounding set %v", got, p.Capabilities.Bounding)
	}
	if len(p.Rlimits) != 1 || p.Rlimits[0].Type != "RLIMIT_NOFILE" || p.Rlimits[0].Soft != min(DefaultNoFile, NoFileCeiling()) {
		t.Errorf("rlimits %+v", p.Rlimits)
	}
	r := s.Linux.Resources
	if *r.CPU.Quota != 200000 || *r.CPU.Period != 100000 {
		t.Errorf("cpu %d/%d", *r.CPU.Quota, *r.CPU.Period)
	}
	if *r.Memory.Limit != 512<<20 || *r.Memory.Swap != 512<<20 || *r.Pids.Limit != 1024 {
		t.Errorf("memory %d swap %d pids %d", *r.Memory.Limit, *r.Memory.Swap, *r.Pids.Limit)
	}
	if s.Linux.CgroupsPath != "/cubby/sbx1" {
		t.Errorf("cgroups path %q", s.Linux.CgroupsPath)
	}
	var ns []string
	for _, n := range s.Linux.Namespaces {
		ns = append(ns, string(n.Type))
		if n.Type == specs.NetworkNamespace && n.Path != "/var/run/netns/sbx1" {
			t.Errorf("netns path %q", n.Path)
		}
	}
	slices.Sort(ns)
	if !slices.Equal(ns, []string{"cgroup", "ipc", "mount", "network", "pid", "uts"}) {
		t.Errorf("namespaces %v", ns)
	}
	var dests []string
	for _, m := range s.Mounts {
		dests = append(dests, m.Destination)
	}
	want := []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup", "/etc/hosts"}
	if !slices.Equal(dests, want) {
		t.Errorf("mounts %v, want %v", dests, want)
	}
	if !slices.Contains(s.Linux.MaskedPaths, "/proc/kcore") || !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Errorf("masked %v readonly %v", s.Linux.MaskedPaths, s.Linux.ReadonlyPaths)
	}
}

func TestBuildDefaults(t *testing.T) {
	o := options()
	o.NetNSPath, o.CPUCount, o.MemoryBytes, o.PidsLimit = "", 0, 0, 0
	o.Env = []string{"PATH=/bin"}
	o.Hostname, o.Cwd = "box", "/home/user"
	o.NoFile = 4096
	s, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	if rl := s.Process.Rlimits[0]; rl.Soft != 4096 || rl.Hard != 4096 {
		t.Errorf("rlimit %+v, want 4096", rl)
	}
	r := s.Linux.Resources
	if r.CPU != nil || r.Memory != nil || r.Pids != nil {
		t.Errorf("limits set without options: %+v", r)
	}
	if !slices.Equal(s.Process.Env, []string{"PATH=/bin"}) || s.Hostname != "box" || s.Process.Cwd != "/home/user" {
		t.Errorf("env %v hostname %q cwd %q", s.Process.Env, s.Hostname, s.Process.Cwd)
	}
	for _, n := range s.Linux.Namespaces {
		if n.Path != "" {
			t.Errorf("namespace %s joins %q", n.Type, n.Path)
		}
	}
}

func TestBuildRejects(t *testing.T) {
	for name, mutate := range map[string]func(*Options){
		"no id":          func(o *Options) { o.ID = "" },
		"relative root":  func(o *Options) { o.RootfsDir = "rootfs" },
		"no args":        func(o *Options) { o.Args = nil },
		"relative cwd":   func(o *Options) { o.Cwd = "tmp" },
		"negative mem":   func(o *Options) { o.MemoryBytes = -1 },
		"relative mount": func(o *Options) { o.Mounts[0].Destination = "etc/hosts" },
		"relative cg":    func(o *Options) { o.CgroupsPath = "cubby/x" },
	} {
		o := options()
		mutate(&o)
		if _, err := Build(o); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestWriteBundle(t *testing.T) {
	s, err := Build(options())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "bundle")
	if err := WriteBundle(dir, s); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, ConfigName))
	if err != nil {
		t.Fatal(err)
	}
	var back specs.Spec
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Version != SpecVersion || back.Root.Path != s.Root.Path || *back.Linux.Resources.Memory.Limit != 512<<20 {
		t.Errorf("round trip: %+v", back)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("bundle holds %d entries, want only config.json", len(entries))
	}
}

func TestBuildUserNS(t *testing.T) {
	o := options()
	o.UserNS = &UserNS{Path: "/var/lib/cubby/sbx1/userns", HostID: 1 << 30, Size: 65536}
	s, err := Build(o)
	if err != nil {
		t.Fatal(err)
	}
	var user *specs.LinuxNamespace
	for i, ns := range s.Linux.Namespaces {
		if ns.Type == specs.UserNamespace {
			user = &s.Linux.Namespaces[i]
		}
	}
	if user == nil || user.Path != o.UserNS.Path {
		t.Fatalf("user namespace %+v in %+v", user, s.Linux.Namespaces)
	}
	if len(s.Linux.UIDMappings)+len(s.Linux.GIDMappings) != 0 {
		t.Errorf("mappings next to a namespace path: %+v %+v", s.Linux.UIDMappings, s.Linux.GIDMappings)
	}
	if len(s.Process.Rlimits) == 0 && hasCapability(unix.CAP_SYS_RESOURCE) {
		t.Error("rlimits dropped although the runtime can set them")
	}
	if len(s.Process.Rlimits) != 0 && !hasCapability(unix.CAP_SYS_RESOURCE) {
		t.Error("rlimits a runtime without CAP_SYS_RESOURCE cannot set in a user namespace")
	}

	o.UserNS.Path = "" // the runtime creates the namespace from the mapping
	if s, err = Build(o); err != nil {
		t.Fatal(err)
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: 1 << 30, Size: 65536}}
	if !slices.Equal(s.Linux.UIDMappings, want) || !slices.Equal(s.Linux.GIDMappings, want) || len(s.Process.Rlimits) != 1 {
		t.Errorf("mappings %+v %+v rlimits %+v", s.Linux.UIDMappings, s.Linux.GIDMappings, s.Process.Rlimits)
	}
	for _, bad := range []UserNS{{Path: "/x"}, {Path: "relative", Size: 1}} {
		o.UserNS = &bad
		if _, err := Build(o); err == nil {
			t.Errorf("Build accepted user namespace %+v", bad)
		}
	}
}
