package builds

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/template"
)

// buildLog is the log of one running build, kept in memory for status
// polls; the builder keeps every build's log in the templates directory
// (template.Manager.BuildLogByID), read once the build is over.
type buildLog struct {
	mu      sync.Mutex
	entries []template.Entry
}

// Add appends e; safe for concurrent use.
func (l *buildLog) Add(e template.Entry) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.entries = append(l.entries, e)
}

func (l *buildLog) snapshot() []template.Entry {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.entries)
}

// entries returns every log entry of build id so far.
func (s *Service) entries(id string) ([]template.Entry, error) {
	s.mu.Lock()
	j := s.jobs[id]
	s.mu.Unlock()
	if j != nil {
		return j.log.snapshot(), nil
	}
	return s.cfg.Manager.BuildLogByID(id)
}

// levelRank orders log levels (debug < info < warn < error).
var levelRank = map[string]int{template.LevelDebug: 0, template.LevelInfo: 1, template.LevelWarn: 2, template.LevelError: 3}

// filter keeps entries at or above level ("" = all).
func filter(entries []template.Entry, level string) []template.Entry {
	if level == "" {
		return entries
	}
	min := levelRank[level]
	var out []template.Entry
	for _, e := range entries {
		if levelRank[e.Level] >= min {
			out = append(out, e)
		}
	}
	return out
}

// Status is a build with a page of its log.
type Status struct {
	Build   store.TemplateBuild
	Entries []template.Entry // the requested page
	// ReasonEntries are the last entries of the failed step (status error).
	ReasonEntries []template.Entry
}

// maxReasonEntries is how many log entries a failure's reason carries.
const maxReasonEntries = 20

// Status returns build buildID with its log entries from offset on (at most
// limit, at level or above). Errors wrap ErrNotFound.
func (s *Service) Status(ctx context.Context, team, templateID, buildID string, offset, limit int, level string) (Status, error) {
	b, err := s.Build(ctx, team, templateID, buildID)
	if err != nil {
		return Status{}, err
	}
	all, err := s.entries(buildID)
	if err != nil {
		return Status{}, err
	}
	page := filter(all, level)
	offset = min(max(offset, 0), len(page))
	page = page[offset:min(offset+limit, len(page))]
	st := Status{Build: b, Entries: page}
	if b.Status == store.BuildError {
		for i := len(all) - 1; i >= 0 && len(st.ReasonEntries) < maxReasonEntries; i-- {
			if all[i].Step == b.ReasonStep {
				st.ReasonEntries = append([]template.Entry{all[i]}, st.ReasonEntries...)
			}
		}
	}
	return st, nil
}

// Logs returns build buildID's log entries stamped at or after cursor (or,
// backward, at or before it; zero = from the start or the end), at most
// limit, at level or above, oldest first. Errors wrap ErrNotFound.
func (s *Service) Logs(ctx context.Context, team, templateID, buildID string, cursor time.Time, limit int, backward bool, level string) ([]template.Entry, error) {
	if _, err := s.Build(ctx, team, templateID, buildID); err != nil {
		return nil, err
	}
	all, err := s.entries(buildID)
	if err != nil {
		return nil, err
	}
	all = filter(all, level)
	var out []template.Entry
	for _, e := range all {
		if cursor.IsZero() || (!backward && !e.Time.Before(cursor)) || (backward && !e.Time.After(cursor)) {
			out = append(out, e)
		}
	}
	if len(out) > limit {
		if backward {
			out = out[len(out)-limit:]
		} else {
			out = out[:limit]
		}
	}
	return out, nil
}
