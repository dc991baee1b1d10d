package telemetry

import (
	"math"
	"regexp"
	"strconv"
	"testing"
)

func TestParseProcStat(t *testing.T) {
	raw := []byte("cpu  100 20 30 400 50 6 7 8 0 0\ncpu0 50 10 15 200 25 3 3 4 0 0\ncpu1 50 10 15 200 25 3 4 4 0 0\nintr 1 2\n")
	busy, idle, cpus, err := parseProcStat(raw)
	if err != nil || cpus != 2 || math.Abs(busy-1.71) > 1e-9 || idle != 4.5 {
		t.Fatalf("parseProcStat = %v %v %v %v; want 1.71 4.5 2", busy, idle, cpus, err)
	}
	for _, bad := range []string{"intr 1\n", "cpu 1 2 3\n", "cpu a b c d e f g h\n"} {
		if _, _, _, err := parseProcStat([]byte(bad)); err == nil {
			t.Errorf("parseProcStat(%q) succeeded", bad)
		}
	}
}

// TestHostMetricsExported scrapes the real host figures and the pool target.
func TestHostMetricsExported(t *testing.T) {
	m := New()
	if err := m.WatchHost(t.TempDir()); err != nil {
		t.Fatal(err)
	}
	if err := m.WatchHost("/"); err == nil {
		t.Fatal("second WatchHost succeeded")
	}
	m.PoolTarget("tplx", 3)
	body := scrape(t, m)
	for _, name := range []string{
		`cubby_host_cpu_seconds_total{mode="busy"}`, `cubby_host_cpu_seconds_total{mode="idle"}`, `cubby_host_cpus`,
		`cubby_host_memory_bytes{kind="total"}`, `cubby_host_memory_bytes{kind="available"}`,
		`cubby_host_disk_bytes{kind="total"}`, `cubby_host_disk_bytes{kind="free"}`,
	} {
		re := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(name) + ` ([0-9.e+]+)$`)
		mm := re.FindStringSubmatch(body)
		if mm == nil {
			t.Errorf("%s missing", name)
			continue
		}
		if v, _ := strconv.ParseFloat(mm[1], 64); v <= 0 {
			t.Errorf("%s = %s, want > 0", name, mm[1])
		}
	}
	if !regexp.MustCompile(`(?m)^cubby_pool_target_sandboxes\{template="tplx"\} 3$`).MatchString(body) {
		t.Error("pool target missing")
	}
}
