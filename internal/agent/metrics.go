package agent

import (
	"fmt"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/cgroups"
)

// cpuSampler remembers the previous CPU reading so /metrics can report a percentage.
var cpuSampler struct {
	sync.Mutex
	at    time.Time
	usage uint64
}

// sampleMetrics reads the sandbox's own cgroup (the root of its cgroup namespace)
// and root filesystem.
func sampleMetrics() (agentapi.Metrics, error) {
	now := time.Now()
	s, err := cgroups.Read("/")
	if err != nil {
		return agentapi.Metrics{}, fmt.Errorf("read cgroup: %w", err)
	}
	m := agentapi.Metrics{
		Timestamp: now.Unix(),
		CPUCount:  runtime.NumCPU(),
		MemUsed:   s.MemUsed,
		MemTotal:  s.MemLimit,
		MemCache:  s.MemCache,
	}
	cpuSampler.Lock()
	if !cpuSampler.at.IsZero() && s.CPUUsageNs >= cpuSampler.usage {
		if wall := now.Sub(cpuSampler.at); wall > 0 {
			m.CPUUsedPct = float64(s.CPUUsageNs-cpuSampler.usage) / float64(wall.Nanoseconds()) * 100
		}
	}
	cpuSampler.at, cpuSampler.usage = now, s.CPUUsageNs
	cpuSampler.Unlock()
	var st unix.Statfs_t
	if err := unix.Statfs("/", &st); err == nil {
		m.DiskTotal = st.Blocks * uint64(st.Bsize)
		m.DiskUsed = (st.Blocks - st.Bfree) * uint64(st.Bsize)
	}
	return m, nil
}
