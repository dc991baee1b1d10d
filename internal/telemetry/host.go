package telemetry

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/meminfo"
)

// userHZ is the unit of the /proc/stat CPU times (USER_HZ, 100 on Linux
// for every architecture Cubby runs on; proc(5)).
const userHZ = 100

var (
	hostCPUDesc = prometheus.NewDesc("cubby_host_cpu_seconds_total",
		"Host CPU time summed over all CPUs since boot, by mode (busy: user, nice, system, irq, softirq, steal; idle: idle, iowait), from /proc/stat.",
		[]string{"mode"}, nil)
	hostCPUsDesc = prometheus.NewDesc("cubby_host_cpus",
		"Online CPUs of the host (cpuN lines of /proc/stat).", nil, nil)
	hostMemDesc = prometheus.NewDesc("cubby_host_memory_bytes",
		"Host memory in bytes by kind (total: MemTotal, available: MemAvailable), from /proc/meminfo.",
		[]string{"kind"}, nil)
	hostDiskDesc = prometheus.NewDesc("cubby_host_disk_bytes",
		"Size and free space (available to unprivileged users) of the filesystem holding the data dir, bytes.",
		[]string{"kind"}, nil)
)

// hostCollector exports the host's CPU time, memory and data-dir disk
// figures, read at scrape time.
type hostCollector struct {
	dataDir string
}

// WatchHost registers the cubby_host_* metrics: CPU time, memory, and the
// size and free space of the filesystem holding dataDir. Errors: a second call.
func (m *Metrics) WatchHost(dataDir string) error {
	if err := m.reg.Register(hostCollector{dataDir: dataDir}); err != nil {
		return fmt.Errorf("register host metrics: %w", err)
	}
	return nil
}

func (c hostCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- hostCPUDesc
	ch <- hostCPUsDesc
	ch <- hostMemDesc
	ch <- hostDiskDesc
}

// Collect reports what it can read; a figure that cannot be read is left out.
func (c hostCollector) Collect(ch chan<- prometheus.Metric) {
	if raw, err := os.ReadFile("/proc/stat"); err == nil {
		if busy, idle, cpus, err := parseProcStat(raw); err == nil {
			ch <- prometheus.MustNewConstMetric(hostCPUDesc, prometheus.CounterValue, busy, "busy")
			ch <- prometheus.MustNewConstMetric(hostCPUDesc, prometheus.CounterValue, idle, "idle")
			ch <- prometheus.MustNewConstMetric(hostCPUsDesc, prometheus.GaugeValue, float64(cpus))
		}
	}
	if mi, err := meminfo.Read(); err == nil {
		ch <- prometheus.MustNewConstMetric(hostMemDesc, prometheus.GaugeValue, float64(mi.Total), "total")
		ch <- prometheus.MustNewConstMetric(hostMemDesc, prometheus.GaugeValue, float64(mi.Available), "available")
	}
	var st unix.Statfs_t
	if c.dataDir != "" && unix.Statfs(c.dataDir, &st) == nil {
		bs := float64(st.Bsize)
		ch <- prometheus.MustNewConstMetric(hostDiskDesc, prometheus.GaugeValue, float64(st.Blocks)*bs, "total")
		ch <- prometheus.MustNewConstMetric(hostDiskDesc, prometheus.GaugeValue, float64(st.Bavail)*bs, "free")
	}
}

// parseProcStat returns the busy and idle CPU seconds of the aggregate "cpu"
// line of /proc/stat and the number of cpuN lines.
func parseProcStat(raw []byte) (busy, idle float64, cpus int, err error) {
	found := false
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 || !strings.HasPrefix(f[0], "cpu") {
			continue
		}
		if f[0] != "cpu" {
			cpus++
			continue
		}
		if len(f) < 9 {
			return 0, 0, 0, errors.New("/proc/stat: short cpu line")
		}
		var v [8]float64
		for i := range v {
			n, err := strconv.ParseUint(f[i+1], 10, 64)
			if err != nil {
				return 0, 0, 0, fmt.Errorf("/proc/stat cpu field %d: %w", i+1, err)
			}
			v[i] = float64(n) / userHZ
		}
		// user nice system idle iowait irq softirq steal
		busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7]
		idle = v[3] + v[4]
		found = true
	}
	if !found {
		return 0, 0, 0, errors.New("/proc/stat has no cpu line")
	}
	return busy, idle, cpus, sc.Err()
}
