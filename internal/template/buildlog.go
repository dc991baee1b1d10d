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
	"slices"
	"sync"
)

// Every build keeps its log in the templates directory, as
// logs/<buildID>.jsonl: one JSON BuildLogEntry per line, oldest first, at
// most maxBuildLogLines (the last ones; a first entry says how many earlier
// lines were dropped), each at most maxBuildLogLine bytes. Trees of earlier
// Cubby versions kept theirs next to their template.json (legacyBuildLog).
const (
	maxBuildLogLines = 20000
	maxBuildLogLine  = 4096
	legacyBuildLog   = "build.log"
)

// BuildLogEntry is one line of a template build's log.
type BuildLogEntry = Entry

// buildIDRe matches build IDs: UUIDs of builds, hex digests of legacy trees.
var buildIDRe = regexp.MustCompile(`^[0-9a-f][0-9a-f-]{7,127}(\.[0-9]+)?$`)

func (m *Manager) buildLogPath(buildID string) string {
	return filepath.Join(m.dir, "logs", buildID+".jsonl")
}

// BuildLog returns the log of build buildID of the template with this ID,
// name or alias, oldest line first; nil when the build kept none. Errors
// wrap ErrNotFound for an unknown template or build, or the read failure.
func (m *Manager) BuildLog(idOrAlias, buildID string) ([]BuildLogEntry, error) {
	if !buildIDRe.MatchString(buildID) {
		return nil, fmt.Errorf("template %q build %q: %w", idOrAlias, buildID, ErrNotFound)
	}
	builds, err := m.Builds(idOrAlias)
	if err != nil {
		return nil, err
	}
	i := slices.IndexFunc(builds, func(b Info) bool { return b.BuildID == buildID })
	switch {
	case i < 0:
		return nil, fmt.Errorf("template %q build %q: %w", idOrAlias, buildID, ErrNotFound)
	case builds[i].Tag == "": // a legacy tree
		return readBuildLog(filepath.Join(filepath.Dir(builds[i].RootfsDir), legacyBuildLog))
	}
	return readBuildLog(m.buildLogPath(buildID))
}

// BuildLogByID returns the log a build with this ID kept (published or
// failed), or nil when it kept none.
func (m *Manager) BuildLogByID(buildID string) ([]BuildLogEntry, error) {
	if !buildIDRe.MatchString(buildID) {
		return nil, fmt.Errorf("build %q: %w", buildID, ErrNotFound)
	}
	return readBuildLog(m.buildLogPath(buildID))
}

func readBuildLog(path string) ([]BuildLogEntry, error) {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("build log: %w", err)
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
		return nil, fmt.Errorf("build log %s: %w", path, err)
	}
	return out, nil
}

// buildRecorder keeps a build's log entries, the last maxBuildLogLines of
// them, long messages cut. Safe for concurrent use.
type buildRecorder struct {
	mu      sync.Mutex
	entries []BuildLogEntry
	dropped int
}

func newBuildRecorder() *buildRecorder { return &buildRecorder{} }

func (r *buildRecorder) add(e BuildLogEntry) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(e.Message) > maxBuildLogLine {
		e.Message = e.Message[:maxBuildLogLine] + "…"
	}
	r.entries = append(r.entries, e)
	if n := len(r.entries) - maxBuildLogLines; n > 0 {
		r.dropped += n
		r.entries = append(r.entries[:0:0], r.entries[n:]...)
	}
}

// writeFile writes the recorded entries to path (directories created).
func (r *buildRecorder) writeFile(path string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	if r.dropped > 0 {
		_ = enc.Encode(BuildLogEntry{Time: r.entries[0].Time, Level: LevelWarn, Message: fmt.Sprintf("… %d earlier lines not kept", r.dropped)})
	}
	for _, e := range r.entries {
		if err := enc.Encode(e); err != nil {
			return fmt.Errorf("encode build log: %w", err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("build log: %w", err)
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("build log: %w", err)
	}
	return os.Rename(tmp, path)
}
