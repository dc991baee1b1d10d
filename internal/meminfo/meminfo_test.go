package meminfo

import "testing"

func TestParse(t *testing.T) {
	m, err := Parse([]byte("MemTotal:  2048 kB\nMemFree: 10 kB\nMemAvailable:  1024 kB\n"))
	if err != nil || m.Total != 2048<<10 || m.Available != 1024<<10 {
		t.Fatalf("Parse = %+v, %v", m, err)
	}
	if _, err := Parse([]byte("MemTotal: 1 kB\n")); err == nil {
		t.Fatal("meminfo without MemAvailable parsed")
	}
}

func TestReadHost(t *testing.T) {
	m, err := Read()
	if err != nil || m.Total == 0 || m.Available > m.Total {
		t.Fatalf("Read = %+v, %v", m, err)
	}
}

func TestParseRollup(t *testing.T) {
	in := "55d0c0000000-7ffc0000000 ---p 00000000 00:00 0                          [rollup]\n" +
		"Rss:               12572 kB\nPss:                4100 kB\nPss_Anon:           3000 kB\n" +
		"Shared_Clean:       8000 kB\nPrivate_Clean:       100 kB\nPrivate_Dirty:      3000 kB\nAnonymous:          3000 kB\n"
	r, err := ParseRollup([]byte(in))
	if err != nil || r != (Rollup{RSS: 12572 << 10, PSS: 4100 << 10, USS: 3100 << 10, Anon: 3000 << 10}) {
		t.Fatalf("ParseRollup = %+v, %v", r, err)
	}
	if _, err := ParseRollup([]byte("Rss: 1 kB\n")); err == nil {
		t.Fatal("rollup without Pss parsed")
	}
}
