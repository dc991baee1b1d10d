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
