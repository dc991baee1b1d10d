// Package meminfo reads memory figures from /proc (proc(5)): the host's from
// /proc/meminfo and one process's from /proc/<pid>/smaps_rollup.
package meminfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Info is the host's memory, in bytes.
type Info struct {
	Total     uint64 // MemTotal
	Available uint64 // MemAvailable: what can be allocated without swapping
}

// Read reads /proc/meminfo. Errors wrap the fs error or say which field is missing.
func Read() (Info, error) {
	raw, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return Info{}, fmt.Errorf("read meminfo: %w", err)
	}
	return Parse(raw)
}

// Parse parses /proc/meminfo content ("Name: value kB" lines); both MemTotal and
// MemAvailable must be present.
func Parse(data []byte) (Info, error) {
	var m Info
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		v, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			continue
		}
		switch f[0] {
		case "MemTotal:":
			m.Total = v << 10
		case "MemAvailable:":
			m.Available = v << 10
		}
	}
	if m.Total == 0 || m.Available == 0 {
		return Info{}, errors.New("meminfo lacks MemTotal or MemAvailable")
	}
	return m, sc.Err()
}
