package pool

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// hostMemory returns MemTotal and MemAvailable from /proc/meminfo, in bytes.
func hostMemory() (total, available uint64, err error) {
	data, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, 0, fmt.Errorf("read meminfo: %w", err)
	}
	var seen int
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := bytes.Fields(sc.Bytes())
		if len(f) < 2 {
			continue
		}
		var dst *uint64
		switch string(f[0]) {
		case "MemTotal:":
			dst = &total
		case "MemAvailable:":
			dst = &available
		default:
			continue
		}
		kib, err := strconv.ParseUint(string(f[1]), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("parse meminfo %s: %w", f[0], err)
		}
		*dst = kib << 10
		seen++
	}
	if seen != 2 {
		return 0, 0, fmt.Errorf("meminfo lacks MemTotal or MemAvailable")
	}
	return total, available, nil
}
