// Package memstat measures, from the host, how much memory one sandbox costs: the
// counters of its memory cgroup (cgroup v1 memory.usage_in_bytes and
// memory.stat, or cgroup v2 memory.current and memory.stat; Linux
// Documentation/admin-guide/cgroup-v1/memory.rst and cgroup-v2.rst) and the
// proportional set size summed over the processes in it (/proc/<pid>/smaps_rollup,
// Documentation/filesystems/proc.rst). PSS splits every shared page between the
// processes mapping it, so the sum over a sandbox counts its own pages fully and
// shared pages (template files, the runsc binary) only in part.
package memstat

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/meminfo"
	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// Memcg is one reading of a memory cgroup, in bytes. On cgroup v1 the figures are
// the hierarchical total_* keys of memory.stat; on v2 the memory.stat keys of the
// same meaning.
type Memcg struct {
	Usage        uint64 `json:"usageBytes"`        // memory.usage_in_bytes (v1), memory.current (v2): anon + page cache + kernel memory charged
	Anon         uint64 `json:"anonBytes"`         // total_rss + total_rss_huge (v1), anon (v2)
	File         uint64 `json:"fileBytes"`         // total_cache (v1), file (v2): page cache charged here, shmem included
	Shmem        uint64 `json:"shmemBytes"`        // total_shmem (v1), shmem (v2): tmpfs and memfd pages (gVisor's guest memory)
	InactiveFile uint64 `json:"inactiveFileBytes"` // total_inactive_file (v1), inactive_file (v2): reclaimable first
}

// WorkingSet returns Usage minus InactiveFile in bytes, the figure container
// tools report as the working set.
func (m Memcg) WorkingSet() uint64 {
	if m.InactiveFile > m.Usage {
		return 0
	}
	return m.Usage - m.InactiveFile
}

// Procs is the memory of a set of processes, in bytes, summed from smaps_rollup.
type Procs struct {
	Count int    `json:"count"`    // processes read (those that exited meanwhile are skipped)
	PSS   uint64 `json:"pssBytes"` // sum of Pss
	RSS   uint64 `json:"rssBytes"` // sum of Rss (counts shared pages once per process)
	USS   uint64 `json:"ussBytes"` // sum of Private_Clean + Private_Dirty
	// PSSByName is PSS summed per process name (/proc/<pid>/comm, e.g. "python3",
	// "deno", "cubby"); nil for a single ReadRollup.
	PSSByName map[string]uint64 `json:"pssByName,omitempty"`
}

// Sandbox is the memory of one sandbox's cgroup and its processes.
type Sandbox struct {
	CgroupsPath string `json:"cgroupsPath"`
	Memcg       Memcg  `json:"memcg"`
	Procs       Procs  `json:"procs"`
}

// MemoryCgroupDir returns the directory of the memory cgroup at cgroupsPath (as in
// the OCI spec's linux.cgroupsPath, e.g. "/cubby/<id>") on this host: under the
// v1 memory hierarchy found in /proc/self/mountinfo, or under the v2 root.
// Errors wrap errors.ErrUnsupported when the host has no memory cgroup.
func MemoryCgroupDir(cgroupsPath string) (string, error) {
	if !filepath.IsAbs(cgroupsPath) {
		return "", fmt.Errorf("memory cgroup %q: path is not absolute", cgroupsPath)
	}
	switch cgroups.Mode() {
	case cgroups.LayoutV2:
		return filepath.Join(cgroups.Root, cgroupsPath), nil
	case cgroups.LayoutV1, cgroups.LayoutHybrid:
		mounts, err := mountinfo.Read(mountinfo.SelfPath)
		if err != nil {
			return "", fmt.Errorf("memory cgroup %s: %w", cgroupsPath, err)
		}
		for _, m := range mounts {
			if m.FSType == "cgroup" && m.HasSuperOpt("memory") {
				return filepath.Join(m.Point, cgroupsPath), nil
			}
		}
	}
	return "", fmt.Errorf("memory cgroup %s: no memory controller mounted: %w", cgroupsPath, errors.ErrUnsupported)
}

// Measure reads the memory cgroup at cgroupsPath and the PSS of every process in
// it. A cgroup that does not exist returns an error wrapping fs.ErrNotExist.
func Measure(cgroupsPath string) (Sandbox, error) {
	dir, err := MemoryCgroupDir(cgroupsPath)
	if err != nil {
		return Sandbox{}, err
	}
	mc, err := ReadMemcg(dir)
	if err != nil {
		return Sandbox{}, fmt.Errorf("measure %s: %w", cgroupsPath, err)
	}
	pids, err := ReadPids(dir)
	if err != nil {
		return Sandbox{}, fmt.Errorf("measure %s: %w", cgroupsPath, err)
	}
	return Sandbox{CgroupsPath: cgroupsPath, Memcg: mc, Procs: ReadProcs(pids)}, nil
}

// ReadMemcg reads the memory cgroup directory dir, v1 or v2 (told apart by the
// presence of memory.current). Errors wrap fs.ErrNotExist for a missing cgroup.
func ReadMemcg(dir string) (Memcg, error) {
	v2 := true
	usage, err := cgroups.ReadValue(filepath.Join(dir, "memory.current"))
	if errors.Is(err, fs.ErrNotExist) {
		v2 = false
		usage, err = cgroups.ReadValue(filepath.Join(dir, "memory.usage_in_bytes"))
	}
	if err != nil {
		return Memcg{}, err
	}
	raw, err := os.ReadFile(filepath.Join(dir, "memory.stat"))
	if err != nil {
		return Memcg{}, fmt.Errorf("read memory.stat: %w", err)
	}
	stat, err := ParseStat(raw)
	if err != nil {
		return Memcg{}, fmt.Errorf("%s/memory.stat: %w", dir, err)
	}
	m := Memcg{Usage: usage}
	if v2 {
		m.Anon, m.File, m.Shmem, m.InactiveFile = stat["anon"], stat["file"], stat["shmem"], stat["inactive_file"]
	} else {
		m.Anon = stat["total_rss"] + stat["total_rss_huge"]
		m.File, m.Shmem, m.InactiveFile = stat["total_cache"], stat["total_shmem"], stat["total_inactive_file"]
	}
	return m, nil
}

// ParseStat parses "key value" lines (memory.stat, smaps_rollup without units)
// into a map. A line whose value is not an unsigned integer is an error.
func ParseStat(data []byte) (map[string]uint64, error) {
	out := map[string]uint64{}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("parse %q: %w", sc.Text(), err)
		}
		out[f[0]] = v
	}
	return out, sc.Err()
}

// ReadPids returns the process IDs listed in dir/cgroup.procs.
func ReadPids(dir string) ([]int, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return nil, fmt.Errorf("read cgroup.procs: %w", err)
	}
	var pids []int
	for _, f := range strings.Fields(string(raw)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroup.procs entry %q: %w", f, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// ReadProcs sums smaps_rollup over pids, in total and per process name. Processes
// that exit before they are read (or whose smaps_rollup is unreadable) are skipped
// and not counted.
func ReadProcs(pids []int) Procs {
	p := Procs{PSSByName: map[string]uint64{}}
	for _, pid := range pids {
		r, err := ReadRollup(pid)
		if err != nil {
			continue
		}
		p.Count++
		p.PSS += r.PSS
		p.RSS += r.RSS
		p.USS += r.USS
		p.PSSByName[commName(pid)] += r.PSS
	}
	return p
}

// commName returns the process name of pid, or "?" once it has exited.
func commName(pid int) string {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	if err != nil {
		return "?"
	}
	return strings.TrimSpace(string(raw))
}

// ReadRollup reads /proc/<pid>/smaps_rollup (Linux ≥ 4.14) and returns that one
// process's Rss, Pss and Private_* in bytes (Count = 1).
func ReadRollup(pid int) (Procs, error) {
	r, err := meminfo.ReadRollup(pid)
	return procsOf(r), err
}

// ParseRollup parses smaps_rollup content ("Pss:   1234 kB" lines) into bytes.
// Content without a Pss line is an error.
func ParseRollup(data []byte) (Procs, error) {
	r, err := meminfo.ParseRollup(data)
	return procsOf(r), err
}

func procsOf(r meminfo.Rollup) Procs {
	if r == (meminfo.Rollup{}) {
		return Procs{}
	}
	return Procs{Count: 1, RSS: r.RSS, PSS: r.PSS, USS: r.USS}
}

// Host is the host's memory from /proc/meminfo, in bytes.
type Host struct {
	Total     uint64 `json:"memTotalBytes"`
	Available uint64 `json:"memAvailableBytes"`
}

// ReadHost reads MemTotal and MemAvailable from /proc/meminfo.
func ReadHost() (Host, error) {
	m, err := meminfo.Read()
	if err != nil {
		return Host{}, err
	}
	return Host{Total: m.Total, Available: m.Available}, nil
}
