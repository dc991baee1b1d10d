// Package cgroups reads a container's resource usage and a memory cgroup's
// out-of-memory facts from cgroupfs, on cgroup v1 (including the hybrid layout
// where cgroup2 is mounted beside the v1 controllers) and on the unified cgroup
// v2 hierarchy (Linux Documentation/admin-guide/cgroup-v1 and cgroup-v2.rst).
// Both sides use it: the host reads a sandbox's cgroup from outside, the agent
// its own from inside (so it imports no other package of the host).
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

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// Root is where the cgroup hierarchies are mounted.
const Root = "/sys/fs/cgroup"

// Layout is the cgroup layout of the host.
type Layout string

// Layouts Mode reports.
const (
	LayoutNone   Layout = "none"   // no cgroupfs at Root
	LayoutV1     Layout = "v1"     // only v1 controller hierarchies
	LayoutHybrid Layout = "hybrid" // v1 controllers plus an (empty) cgroup2 at Root/unified
	LayoutV2     Layout = "v2"     // unified cgroup2 hierarchy at Root
)

// unlimitedV1 is the smallest value treated as "no limit" in v1 memory files
// (the kernel reports PAGE_COUNTER_MAX pages, about 2^63 bytes).
const unlimitedV1 = 1 << 62

// Sample is one reading of a cgroup's resource counters.
type Sample struct {
	CPUUsageNs  uint64 // cumulative CPU time in ns (v1 cpuacct.usage, v2 cpu.stat usage_usec*1000)
	MemUsed     uint64 // bytes: memory usage minus inactive file pages (the working set)
	MemCache    uint64 // bytes of page cache (v1 total_cache, v2 file)
	MemLimit    uint64 // bytes; 0 = unlimited
	PidsCurrent uint64 // tasks in the cgroup; 0 when the pids controller is absent
	OOMKills    uint64 // processes killed by the OOM killer in this cgroup
}

// Mode detects the host's cgroup layout from the filesystem types at Root and
// Root/unified (statfs).
func Mode() Layout {
	var fs unix.Statfs_t
	if err := unix.Statfs(Root, &fs); err != nil {
		return LayoutNone
	}
	switch fs.Type {
	case unix.CGROUP2_SUPER_MAGIC:
		return LayoutV2
	case unix.TMPFS_MAGIC:
		var u unix.Statfs_t
		if unix.Statfs(filepath.Join(Root, "unified"), &u) == nil && u.Type == unix.CGROUP2_SUPER_MAGIC {
			return LayoutHybrid
		}
		return LayoutV1
	}
	return LayoutNone
}

// Read samples the cgroup at cgroupsPath (relative to the hierarchy roots, e.g.
// "/cubby/<id>", as in the OCI spec's linux.cgroupsPath). A missing cgroup returns an
// error wrapping fs.ErrNotExist; LayoutNone returns an error wrapping
// errors.ErrUnsupported.
func Read(cgroupsPath string) (Sample, error) {
	if !filepath.IsAbs(cgroupsPath) {
		return Sample{}, fmt.Errorf("read cgroup %q: path is not absolute", cgroupsPath)
	}
	switch Mode() {
	case LayoutV2:
		return ReadV2(filepath.Join(Root, cgroupsPath))
	case LayoutV1, LayoutHybrid:
		dirs, err := v1Dirs(cgroupsPath)
		if err != nil {
			return Sample{}, fmt.Errorf("read cgroup %s: %w", cgroupsPath, err)
		}
		return ReadV1(dirs)
	}
	return Sample{}, fmt.Errorf("read cgroup %s: no cgroupfs at %s: %w", cgroupsPath, Root, errors.ErrUnsupported)
}

// V1Dirs are the per-controller directories of one cgroup on a v1 host. Pids may
// be "" when the pids controller is not mounted.
type V1Dirs struct {
	CPUAcct string
	Memory  string
	Pids    string
}

// v1Dirs finds the cpuacct, memory and pids hierarchies in /proc/self/mountinfo
// (they may be co-mounted, e.g. "cpu,cpuacct") and joins cgroupsPath to each.
func v1Dirs(cgroupsPath string) (V1Dirs, error) {
	mounts, err := mountinfo.Read(mountinfo.SelfPath)
	if err != nil {
		return V1Dirs{}, err
	}
	var d V1Dirs
	for _, m := range mounts {
		if m.FSType != "cgroup" {
			continue
		}
		dir := filepath.Join(m.Point, cgroupsPath)
		if d.CPUAcct == "" && m.HasSuperOpt("cpuacct") {
			d.CPUAcct = dir
		}
		if d.Memory == "" && m.HasSuperOpt("memory") {
			d.Memory = dir
		}
		if d.Pids == "" && m.HasSuperOpt("pids") {
			d.Pids = dir
		}
	}
	if d.CPUAcct == "" || d.Memory == "" {
		return V1Dirs{}, fmt.Errorf("cpuacct or memory cgroup v1 hierarchy not mounted: %w", errors.ErrUnsupported)
	}
	return d, nil
}

// ReadV1 samples a cgroup from its v1 controller directories: cpuacct.usage,
// memory.usage_in_bytes, memory.stat (total_cache, total_inactive_file),
// memory.limit_in_bytes, memory.oom_control (oom_kill) and pids.current.
func ReadV1(d V1Dirs) (Sample, error) {
	var s Sample
	var err error
	if s.CPUUsageNs, err = ReadValue(filepath.Join(d.CPUAcct, "cpuacct.usage")); err != nil {
		return Sample{}, err
	}
	usage, err := ReadValue(filepath.Join(d.Memory, "memory.usage_in_bytes"))
	if err != nil {
		return Sample{}, err
	}
	stat, err := ReadKeyed(filepath.Join(d.Memory, "memory.stat"))
	if err != nil {
		return Sample{}, err
	}
	s.MemCache = firstOf(stat, "total_cache", "cache")
	s.MemUsed = sub(usage, firstOf(stat, "total_inactive_file", "inactive_file"))
	if s.MemLimit, err = readLimit(filepath.Join(d.Memory, "memory.limit_in_bytes")); err != nil {
		return Sample{}, err
	}
	if oom, err := ReadKeyed(filepath.Join(d.Memory, "memory.oom_control")); err == nil {
		s.OOMKills = oom["oom_kill"]
	}
	if d.Pids != "" {
		if s.PidsCurrent, err = readOptional(filepath.Join(d.Pids, "pids.current")); err != nil {
			return Sample{}, err
		}
	}
	return s, nil
}

// ReadV2 samples a cgroup v2 directory: cpu.stat (usage_usec), memory.current,
// memory.stat (file, inactive_file), memory.max, memory.events (oom_kill) and
// pids.current.
func ReadV2(dir string) (Sample, error) {
	var s Sample
	cpu, err := ReadKeyed(filepath.Join(dir, "cpu.stat"))
	if err != nil {
		return Sample{}, err
	}
	s.CPUUsageNs = cpu["usage_usec"] * 1000
	usage, err := ReadValue(filepath.Join(dir, "memory.current"))
	if err != nil {
		return Sample{}, err
	}
	stat, err := ReadKeyed(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return Sample{}, err
	}
	s.MemCache = stat["file"]
	s.MemUsed = sub(usage, stat["inactive_file"])
	if s.MemLimit, err = ReadValue(filepath.Join(dir, "memory.max")); err != nil {
		return Sample{}, err
	}
	if ev, err := ReadKeyed(filepath.Join(dir, "memory.events")); err == nil {
		s.OOMKills = ev["oom_kill"]
	}
	if s.PidsCurrent, err = readOptional(filepath.Join(dir, "pids.current")); err != nil {
		return Sample{}, err
	}
	return s, nil
}

// ReadValue reads a cgroup file holding one unsigned number (memory.max,
// memory.limit_in_bytes, pids.max …); "max" reads as 0 (no limit). Errors wrap
// the fs error or the parse error.
func ReadValue(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read cgroup file: %w", err)
	}
	v := string(bytes.TrimSpace(b))
	if v == "max" {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("read cgroup file %s: %w", path, err)
	}
	return n, nil
}

// readOptional is readUint for files of controllers that may be absent: a missing
// file reads as 0 unless its directory is missing too.
func readOptional(path string) (uint64, error) {
	n, err := ReadValue(path)
	if errors.Is(err, os.ErrNotExist) {
		if _, derr := os.Stat(filepath.Dir(path)); derr == nil {
			return 0, nil
		}
	}
	return n, err
}

// ReadKeyed parses a flat-keyed cgroup file of "key value" lines (memory.stat,
// cpu.stat, memory.events, memory.oom_control); lines whose value is not an
// unsigned number are skipped. Errors wrap the fs error.
func ReadKeyed(path string) (map[string]uint64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read cgroup file: %w", err)
	}
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64); err == nil {
			out[k] = n
		}
	}
	return out, nil
}

func firstOf(m map[string]uint64, keys ...string) uint64 {
	for _, k := range keys {
		if v, ok := m[k]; ok {
			return v
		}
	}
	return 0
}

func sub(a, b uint64) uint64 {
	if b > a {
		return 0
	}
	return a - b
}
