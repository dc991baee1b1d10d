package template

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"
)

// buildLogFile is the build's log kept next to template.json in each tree:
// one JSON BuildLogEntry per line, oldest first.
const buildLogFile = "build.log"

// maxBuildLogLines caps the lines a build log keeps (the last ones; a first
// entry says how many earlier lines were dropped). maxBuildLogLine caps one
// line's length in bytes.
const (
	maxBuildLogLines = 20000
	maxBuildLogLine  = 4096
)

// treeRe matches tree directory names: a hex digest, optionally ".N".
var treeRe = regexp.MustCompile(`^[0-9a-f]{8,128}(\.[0-9]+)?$`)

// BuildLogEntry is one line of a template build's output as recorded by
// Build: Time (UTC), Level ("info" for build output) and the line itself.
type BuildLogEntry struct {
	Time    time.Time `json:"timestamp"`
	Level   string    `json:"level"`
	Message string    `json:"message"`
}

// BuildID is the build that produced the tree (the tree's directory name:
// the definition's digest, ".N" after forced rebuilds).
func (i Info) BuildID() string { return filepath.Base(filepath.Dir(i.RootfsDir)) }

// BuildLog returns the log of build buildID of the template with this ID,
// name or alias, oldest line first. A tree built before build logs were kept
// has none: nil, nil. Errors wrap ErrNotFound for an unknown template or
// build, or the read failure.
func (m *Manager) BuildLog(idOrAlias, buildID string) ([]BuildLogEntry, error) {
	info, err := m.Get(idOrAlias)
	if err != nil {
		return nil, err
	}
	if !treeRe.MatchString(buildID) {
		return nil, fmt.Errorf("template %s build %q: %w", info.ID, buildID, ErrNotFound)
	}
	treeDir := filepath.Join(m.dir, info.ID, buildID)
	if _, err := os.Stat(filepath.Join(treeDir, infoFile)); err != nil {
		return nil, fmt.Errorf("template %s build %q: %w", info.ID, buildID, ErrNotFound)
	}
	f, err := os.Open(filepath.Join(treeDir, buildLogFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("template %s build %s log: %w", info.ID, buildID, err)
	}
	defer f.Close()
	var out []BuildLogEntry
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var e BuildLogEntry
		if json.Unmarshal(sc.Bytes(), &e) == nil {
			out = append(out, e)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("template %s build %s log: %w", info.ID, buildID, err)
	}
	return out, nil
}

// buildRecorder is an io.Writer that records a build's output lines with
// their time, keeping the last maxBuildLogLines. Safe for concurrent use.
type buildRecorder struct {
	mu      sync.Mutex
	entries []BuildLogEntry
	dropped int
	partial []byte
	now     func() time.Time
}

func newBuildRecorder() *buildRecorder { return &buildRecorder{now: time.Now} }

// Write implements io.Writer; it never fails.
func (r *buildRecorder) Write(b []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.partial = append(r.partial, b...)
	for {
		i := bytes.IndexByte(r.partial, '\n')
		if i < 0 {
			break
		}
		r.add(string(r.partial[:i]))
		r.partial = r.partial[i+1:]
	}
	if len(r.partial) > maxBuildLogLine {
		r.add(string(r.partial))
		r.partial = r.partial[:0]
	}
	return len(b), nil
}

func (r *buildRecorder) add(line string) {
	line = strings.TrimRight(line, "\r")
	if len(line) > maxBuildLogLine {
		line = line[:maxBuildLogLine] + "…"
	}
	r.entries = append(r.entries, BuildLogEntry{Time: r.now().UTC(), Level: "info", Message: line})
	if n := len(r.entries) - maxBuildLogLines; n > 0 {
		r.dropped += n
		r.entries = append(r.entries[:0:0], r.entries[n:]...)
	}
}

// writeTo writes the recorded lines (and a pending partial line) as
// dir/build.log.
func (r *buildRecorder) writeTo(dir string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.partial) > 0 {
		r.add(string(r.partial))
		r.partial = nil
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if r.dropped > 0 {
		first := r.entries[0].Time
		_ = enc.Encode(BuildLogEntry{Time: first, Level: "warn", Message: fmt.Sprintf("… %d earlier lines not kept", r.dropped)})
	}
	for _, e := range r.entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("encode build log: %w", err)
		}
	}
	return writeFileSync(filepath.Join(dir, buildLogFile), buf.Bytes())
}
