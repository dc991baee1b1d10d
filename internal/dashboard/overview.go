package dashboard

import (
	"context"
	"net/http"
	"sort"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/cubby-dev/cubby/sdk"
)

// minCPUInterval is the shortest interval a CPU usage figure is computed over.
const minCPUInterval = 500 * time.Millisecond

// overview is what the overview page shows (and /api/overview returns).
type overview struct {
	Running  int        `json:"running"`
	Paused   int        `json:"paused"`
	ListErr  string     `json:"listError,omitempty"`
	Create   createStat `json:"create"`
	Pools    []poolFill `json:"pools"`
	Host     hostStat   `json:"host"`
	HasStats bool       `json:"hasStats"`
	At       time.Time  `json:"at"`
}

type createStat struct {
	Count int     `json:"count"` // successful creates since the server started
	P50ms float64 `json:"p50ms"` // median, estimated from the histogram buckets; 0 without data
}

type poolFill struct {
	Template string `json:"template"`
	Ready    int    `json:"ready"`
	Booting  int    `json:"booting"`
	Target   int    `json:"target"`
}

type hostStat struct {
	CPUs      int     `json:"cpus"`
	CPUPct    float64 `json:"cpuPct"` // busy share since the previous reading; -1 when unknown yet
	MemTotal  int64   `json:"memTotal"`
	MemUsed   int64   `json:"memUsed"`
	DiskTotal int64   `json:"diskTotal"`
	DiskFree  int64   `json:"diskFree"` // available to unprivileged users
}

// cpuSample is one reading of the host's CPU time.
type cpuSample struct {
	busy, idle float64
	at         time.Time
}

func (d *Dashboard) overviewPage(w http.ResponseWriter, r *http.Request, sess *session) {
	d.page(w, sess, http.StatusOK, "overview", "Overview", "overview", d.overview(r.Context(), sess))
}

func (d *Dashboard) overviewJSON(w http.ResponseWriter, r *http.Request, sess *session) {
	writeJSON(w, http.StatusOK, d.overview(r.Context(), sess))
}

// overview counts the session's sandboxes through the API and reads the
// server's figures from its metrics.
func (d *Dashboard) overview(ctx context.Context, sess *session) overview {
	o := overview{At: time.Now().UTC(), Pools: []poolFill{}, Host: hostStat{CPUPct: -1}}
	conn := d.conn(sess)
	for info, err := range sdk.List(ctx, &sdk.ListOptions{ConnectionOptions: conn,
		State: []sdk.SandboxState{sdk.StateRunning, sdk.StatePaused}}) {
		if err != nil {
			o.ListErr = errorText(err)
			break
		}
		if info.State == sdk.StatePaused {
			o.Paused++
		} else {
			o.Running++
		}
	}
	if d.cfg.Stats == nil {
		return o
	}
	fams, err := d.cfg.Stats.Gather()
	if err != nil {
		return o
	}
	o.HasStats = true
	byName := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		byName[f.GetName()] = f
	}
	o.Create = createFrom(byName["cubby_sandbox_create_duration_seconds"])
	o.Pools = d.poolsFrom(ctx, conn, byName["cubby_pool_sandboxes"], byName["cubby_pool_target_sandboxes"])
	o.Host = d.hostFrom(byName)
	return o
}

// createFrom sums the successful creates of every template and estimates
// their median by linear interpolation inside the histogram bucket holding it.
func createFrom(f *dto.MetricFamily) createStat {
	var total uint64
	cum := map[float64]uint64{}
	for _, m := range f.GetMetric() {
		if label(m, "outcome") != "ok" {
			continue
		}
		h := m.GetHistogram()
		total += h.GetSampleCount()
		for _, b := range h.GetBucket() {
			cum[b.GetUpperBound()] += b.GetCumulativeCount()
		}
	}
	out := createStat{Count: int(total)}
	if total == 0 {
		return out
	}
	bounds := make([]float64, 0, len(cum))
	for b := range cum {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	half := float64(total) / 2
	lower, below := 0.0, 0.0
	for _, ub := range bounds {
		c := float64(cum[ub])
		if c >= half {
			frac := 0.0
			if c > below {
				frac = (half - below) / (c - below)
			}
			out.P50ms = (lower + (ub-lower)*frac) * 1000
			return out
		}
		lower, below = ub, c
	}
	out.P50ms = lower * 1000 // in the +Inf bucket: at least the last bound
	return out
}

// poolsFrom reads the warm-pool gauges (by template ID), naming templates by
// their alias when the API lists them.
func (d *Dashboard) poolsFrom(ctx context.Context, conn sdk.ConnectionOptions, size, target *dto.MetricFamily) []poolFill {
	byID := map[string]*poolFill{}
	get := func(id string) *poolFill {
		if p, ok := byID[id]; ok {
			return p
		}
		p := &poolFill{Template: id}
		byID[id] = p
		return p
	}
	for _, m := range size.GetMetric() {
		p, n := get(label(m, "template")), int(m.GetGauge().GetValue())
		switch label(m, "state") {
		case "ready":
			p.Ready = n
		case "booting":
			p.Booting = n
		}
	}
	for _, m := range target.GetMetric() {
		get(label(m, "template")).Target = int(m.GetGauge().GetValue())
	}
	out := []poolFill{}
	if len(byID) == 0 {
		return out
	}
	names := map[string]string{}
	if tpls, err := sdk.ListTemplates(ctx, &conn); err == nil {
		for _, t := range tpls {
			if len(t.Aliases) > 0 {
				names[t.TemplateID] = t.Aliases[0]
			}
		}
	}
	for id, p := range byID {
		if n, ok := names[id]; ok {
			p.Template = n
		}
		out = append(out, *p)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Template < out[j].Template })
	return out
}

// hostFrom reads the cubby_host_* figures; CPU usage is the busy share since
// the dashboard's previous reading.
func (d *Dashboard) hostFrom(byName map[string]*dto.MetricFamily) hostStat {
	h := hostStat{CPUPct: -1}
	value := func(name, key, want string) float64 {
		for _, m := range byName[name].GetMetric() {
			if key == "" || label(m, key) == want {
				if c := m.GetCounter(); c != nil {
					return c.GetValue()
				}
				return m.GetGauge().GetValue()
			}
		}
		return 0
	}
	h.CPUs = int(value("cubby_host_cpus", "", ""))
	total, avail := value("cubby_host_memory_bytes", "kind", "total"), value("cubby_host_memory_bytes", "kind", "available")
	h.MemTotal, h.MemUsed = int64(total), int64(total-avail)
	dt, df := value("cubby_host_disk_bytes", "kind", "total"), value("cubby_host_disk_bytes", "kind", "free")
	h.DiskTotal, h.DiskFree = int64(dt), int64(df)
	now := cpuSample{busy: value("cubby_host_cpu_seconds_total", "mode", "busy"),
		idle: value("cubby_host_cpu_seconds_total", "mode", "idle"), at: time.Now()}
	d.cpuMu.Lock()
	defer d.cpuMu.Unlock()
	prev := d.lastCPU
	if !prev.at.IsZero() && now.at.Sub(prev.at) < minCPUInterval {
		h.CPUPct = d.lastPct
		return h
	}
	if db, di := now.busy-prev.busy, now.idle-prev.idle; !prev.at.IsZero() && db+di > 0 {
		h.CPUPct = 100 * db / (db + di)
	}
	d.lastCPU, d.lastPct = now, h.CPUPct
	return h
}

// label returns the value of a metric's label name ("" when absent).
func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
