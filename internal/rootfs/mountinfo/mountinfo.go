// Package mountinfo parses /proc/<pid>/mountinfo (Linux proc(5), "mountinfo").
package mountinfo

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strings"
)

// SelfPath is the mount table of the calling process's mount namespace.
const SelfPath = "/proc/self/mountinfo"

// Mount is one line of a mountinfo file. Paths are unescaped (\040 becomes a space).
type Mount struct {
	ID         int    // mount ID
	Parent     int    // parent mount ID
	Root       string // root of the mount within its filesystem
	Point      string // mount point relative to the process's root
	Options    string // per-mount options, comma separated
	FSType     string // filesystem type, e.g. "ext4", "overlay", "cgroup2"
	Source     string // mount source, e.g. "/dev/loop3"
	SuperOpts  string // per-superblock options, comma separated
	MajorMinor string // st_dev of the filesystem, "major:minor"
}

// HasSuperOpt reports whether opt is one of the per-superblock options.
func (m Mount) HasSuperOpt(opt string) bool { return hasOpt(m.SuperOpts, opt) }

// HasOpt reports whether opt (e.g. "nosuid", "nodev") is one of the per-mount
// options.
func (m Mount) HasOpt(opt string) bool { return hasOpt(m.Options, opt) }

func hasOpt(opts, opt string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == opt {
			return true
		}
	}
	return false
}

// Read parses the mountinfo file at path (usually SelfPath). Errors come from the
// filesystem or from a malformed line.
func Read(path string) ([]Mount, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read mountinfo: %w", err)
	}
	defer f.Close()
	return Parse(f)
}

// Parse parses mountinfo text from r.
func Parse(r io.Reader) ([]Mount, error) {
	var out []Mount
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		m, err := parseLine(sc.Text())
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("parse mountinfo: %w", err)
	}
	return out, nil
}

func parseLine(line string) (Mount, error) {
	fields := strings.Fields(line)
	sep := -1
	for i := 6; i < len(fields); i++ {
		if fields[i] == "-" {
			sep = i
			break
		}
	}
	if len(fields) < 7 || sep < 0 || len(fields) < sep+3 {
		return Mount{}, fmt.Errorf("parse mountinfo line %q: malformed", line)
	}
	var m Mount
	if _, err := fmt.Sscanf(fields[0]+" "+fields[1], "%d %d", &m.ID, &m.Parent); err != nil {
		return Mount{}, fmt.Errorf("parse mountinfo line %q: %w", line, err)
	}
	m.MajorMinor = fields[2]
	m.Root = Unescape(fields[3])
	m.Point = Unescape(fields[4])
	m.Options = fields[5]
	m.FSType = fields[sep+1]
	m.Source = Unescape(fields[sep+2])
	if len(fields) > sep+3 {
		m.SuperOpts = fields[sep+3]
	}
	return m, nil
}

// Unescape decodes the octal escapes (\040 space, \011 tab, \012 newline, \134
// backslash) the kernel writes into mountinfo path fields.
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) && isOctal(s[i+1]) && isOctal(s[i+2]) && isOctal(s[i+3]) {
			b.WriteByte((s[i+1]-'0')<<6 | (s[i+2]-'0')<<3 | (s[i+3] - '0'))
			i += 3
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isOctal(c byte) bool { return c >= '0' && c <= '7' }
