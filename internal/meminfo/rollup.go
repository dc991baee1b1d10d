package meminfo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Rollup is one process's memory from /proc/<pid>/smaps_rollup (Linux ≥ 4.14),
// in bytes.
type Rollup struct {
	RSS  uint64 // Rss: resident pages, shared ones counted fully
	PSS  uint64 // Pss: shared pages split between the processes mapping them
	USS  uint64 // Private_Clean + Private_Dirty
	Anon uint64 // Anonymous
}

// ReadRollup reads /proc/<pid>/smaps_rollup. Errors wrap the fs error (e.g.
// fs.ErrNotExist once the process exited) or the parse error.
func ReadRollup(pid int) (Rollup, error) {
	raw, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "smaps_rollup"))
	if err != nil {
		return Rollup{}, fmt.Errorf("read smaps_rollup of %d: %w", pid, err)
	}
	return ParseRollup(raw)
}

// ParseRollup parses smaps_rollup content ("Pss:   1234 kB" lines). Content
// without a Pss line is an error.
func ParseRollup(data []byte) (Rollup, error) {
	var r Rollup
	found := false
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) != 3 || f[2] != "kB" {
			continue
		}
		kb, err := strconv.ParseUint(f[1], 10, 64)
		if err != nil {
			return Rollup{}, fmt.Errorf("parse %q: %w", sc.Text(), err)
		}
		switch f[0] {
		case "Rss:":
			r.RSS = kb << 10
		case "Pss:":
			r.PSS, found = kb<<10, true
		case "Private_Clean:", "Private_Dirty:":
			r.USS += kb << 10
		case "Anonymous:":
			r.Anon = kb << 10
		}
	}
	if err := sc.Err(); err != nil {
		return Rollup{}, err
	}
	if !found {
		return Rollup{}, errors.New("smaps_rollup has no Pss line")
	}
	return r, nil
}
