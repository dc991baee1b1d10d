package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// Memory is one memory cgroup directory, read for its out-of-memory facts: how
// many processes its OOM killer has killed and its memory limit, on cgroup v1
// (memory.oom_control, memory.limit_in_bytes) and v2 (memory.events,
// memory.max). Safe for concurrent use.
type Memory struct {
	dir string
	v2  bool
}

// OpenMemory returns the memory cgroup at dir: a v1 memory controller
// directory (holding memory.oom_control) or a v2 directory (holding
// memory.events). Errors wrap fs.ErrNotExist when dir has neither file.
func OpenMemory(dir string) (*Memory, error) {
	if _, err := os.Stat(filepath.Join(dir, "memory.oom_control")); err == nil {
		return &Memory{dir: dir}, nil
	}
	if _, err := os.Stat(filepath.Join(dir, "memory.events")); err != nil {
		return nil, fmt.Errorf("memory cgroup %s: no memory.oom_control or memory.events: %w", dir, err)
	}
	return &Memory{dir: dir, v2: true}, nil
}

// MemoryOf returns the memory cgroup process pid (0 = the caller) belongs to,
// found from /proc/<pid>/cgroup and the caller's mountinfo. It works inside a
// container whose cgroupfs mount shows only its own subtree (the mount's root
// is stripped from the process's cgroup path). Errors wrap fs errors or
// errors.ErrUnsupported when no memory cgroup is mounted.
func MemoryOf(pid int) (*Memory, error) {
	proc := "self"
	if pid > 0 {
		proc = strconv.Itoa(pid)
	}
	data, err := os.ReadFile(filepath.Join("/proc", proc, "cgroup"))
	if err != nil {
		return nil, fmt.Errorf("memory cgroup of %s: %w", proc, err)
	}
	v1Path, v2Path, hasV2 := parseProcCgroup(data)
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return nil, fmt.Errorf("memory cgroup of %s: %w", proc, err)
	}
	var candidates []string
	for _, m := range mounts {
		switch {
		case m.FSType == "cgroup" && m.HasSuperOpt("memory") && v1Path != "":
			candidates = append(candidates, under(m, v1Path)...)
		case m.FSType == "cgroup2" && hasV2:
			candidates = append(candidates, under(m, v2Path)...)
		}
	}
	for _, dir := range candidates {
		if c, err := OpenMemory(dir); err == nil {
			return c, nil
		}
	}
	return nil, fmt.Errorf("memory cgroup of %s: not found in mounted cgroup hierarchies: %w", proc, errors.ErrUnsupported)
}

// parseProcCgroup returns the v1 memory path and the v2 path of /proc/pid/cgroup.
func parseProcCgroup(data []byte) (v1, v2 string, hasV2 bool) {
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2, hasV2 = parts[2], true
			continue
		}
		for _, ctl := range strings.Split(parts[1], ",") {
			if ctl == "memory" {
				v1 = parts[2]
			}
		}
	}
	return v1, v2, hasV2
}

// under maps a cgroup path to a directory of mount m (nil when m does not
// show it).
func under(m mountinfo.Mount, path string) []string {
	rel, ok := strings.CutPrefix(path, m.Root)
	if m.Root == "/" {
		rel, ok = path, true
	}
	if !ok || (rel != "" && !strings.HasPrefix(rel, "/")) {
		return nil
	}
	return []string{filepath.Join(m.Point, rel)}
}

// Dir returns the cgroup's directory.
func (c *Memory) Dir() string { return c.dir }

// OOMKills returns the number of processes the cgroup's OOM killer has killed
// since the cgroup was created (v1 memory.oom_control oom_kill, Linux >= 4.13;
// v2 memory.events oom_kill). Errors wrap fs errors, or errors.ErrUnsupported
// when the kernel does not report the counter.
func (c *Memory) OOMKills() (uint64, error) {
	file := "memory.oom_control"
	if c.v2 {
		file = "memory.events"
	}
	kv, err := ReadKeyed(filepath.Join(c.dir, file))
	if err != nil {
		return 0, err
	}
	n, ok := kv["oom_kill"]
	if !ok {
		return 0, fmt.Errorf("%s: no oom_kill counter: %w", filepath.Join(c.dir, file), errors.ErrUnsupported)
	}
	return n, nil
}

// MemoryLimit returns the cgroup's memory limit in bytes, 0 = unlimited (v1
// memory.limit_in_bytes, v2 memory.max).
func (c *Memory) MemoryLimit() (uint64, error) {
	file := "memory.limit_in_bytes"
	if c.v2 {
		file = "memory.max"
	}
	n, err := readLimit(filepath.Join(c.dir, file))
	if err != nil {
		return 0, fmt.Errorf("read memory limit: %w", err)
	}
	return n, nil
}

// readLimit reads a memory limit file: bytes, 0 = unlimited ("max", or a v1
// value of at least unlimitedV1).
func readLimit(path string) (uint64, error) {
	n, err := ReadValue(path)
	if err != nil || n >= unlimitedV1 {
		return 0, err
	}
	return n, nil
}
