package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
)

// Snapshots on the wire (docs/snapshots.md): a snapshot is named by
// "<id>:default", or "<team>/<name>:default" when it has a name, in
// snapshotID and names, and used as the templateID of a create.
const (
	snapshotTag        = ":default"
	snapshotListLimit  = 100 // default and maximum page size of GET /snapshots
	snapshotNameMaxLen = 128
)

var snapshotNames = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)

// snapshotView is a snapshot as GET /snapshots and POST
// /sandboxes/{id}/snapshots answer it: E2B's SnapshotInfo (snapshotID, names)
// and Cubby's details. Mode says what the snapshot holds: "filesystem" (files
// only; a sandbox started from it boots afresh) or "full" (memory and
// processes too).
type snapshotView struct {
	SnapshotID string    `json:"snapshotID"`
	Names      []string  `json:"names"`
	Mode       string    `json:"mode"`
	SizeBytes  int64     `json:"sizeBytes"`
	SandboxID  string    `json:"sandboxID"`
	CreatedAt  time.Time `json:"createdAt"`
}

func viewSnapshot(sn store.Snapshot) snapshotView {
	v := snapshotView{SnapshotID: sn.ID + snapshotTag, Names: []string{}, Mode: sn.Mode, SizeBytes: sn.SizeBytes,
		SandboxID: sn.SandboxID, CreatedAt: sn.CreatedAt}
	if sn.Name != "" {
		v.SnapshotID = sn.Team + "/" + sn.Name + snapshotTag
		v.Names = []string{v.SnapshotID}
	}
	return v
}

// snapshotRef turns a reference as a client sends it ("<id>", "<name>",
// "<team>/<name>", each optionally with ":default") into the ID or name
// within team; ok is false for other teams' names and other tags.
func snapshotRef(team, ref string) (string, bool) {
	ref = strings.TrimSuffix(ref, snapshotTag)
	if strings.Contains(ref, ":") {
		return "", false
	}
	if t, name, found := strings.Cut(ref, "/"); found {
		return name, t == team && name != ""
	}
	return ref, ref != ""
}

// findSnapshot returns team's snapshot named by ref, or store.ErrNotFound.
func (s *Service) findSnapshot(ctx context.Context, team, ref string) (store.Snapshot, error) {
	key, ok := snapshotRef(team, ref)
	if !ok {
		return store.Snapshot{}, fmt.Errorf("snapshot %q: %w", ref, store.ErrNotFound)
	}
	return s.store.FindSnapshot(ctx, team, key)
}

// snapshot captures sandbox id of caller as a new snapshot of its team
// (internal: a fork's, never listed) and records it. 404 for unknown or other
// teams' sandboxes, 409 while paused, 400 for a bad name or a chain too long.
func (s *Service) snapshot(ctx context.Context, id, caller, name string, internal bool) (store.Snapshot, error) {
	if name != "" && (len(name) > snapshotNameMaxLen || !snapshotNames.MatchString(name)) {
		return store.Snapshot{}, badRequest(fmt.Sprintf("invalid snapshot name %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]*, at most %d characters", name, snapshotNameMaxLen))
	}
	ctx, cancel := detach(ctx)
	defer cancel()
	sb, err := s.acquire(id, caller)
	if err != nil {
		return store.Snapshot{}, err
	}
	defer sb.op.Unlock()
	if !s.running(sb) {
		return store.Snapshot{}, &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox '%s' is paused: resume it to snapshot it", id)}
	}
	src, err := s.store.GetSandbox(ctx, id)
	if err != nil {
		return store.Snapshot{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	info, err := s.backend.Snapshot(ctx, id, sandboxid.New())
	switch {
	case errors.Is(err, backend.ErrNotFound):
		s.loseLocked(ctx, sb)
		return store.Snapshot{}, sandboxNotFound(id)
	case errors.Is(err, backend.ErrPaused):
		return store.Snapshot{}, &httpError{status: http.StatusConflict, msg: fmt.Sprintf("sandbox '%s' is paused: resume it to snapshot it", id)}
	case errors.Is(err, backend.ErrTooDeep):
		return store.Snapshot{}, badRequest(err.Error())
	case err != nil:
		return store.Snapshot{}, err
	}
	sn := store.Snapshot{ID: info.ID, Team: sb.team, Name: name, SandboxID: id, TemplateID: src.TemplateID,
		Mode: string(info.Mode), SizeBytes: info.SizeBytes, CreatedAt: s.snapshotTime(), Internal: internal}
	replaced, err := s.store.PutSnapshot(ctx, sn)
	if err != nil {
		s.dropSnapshotData(ctx, info.ID)
		return store.Snapshot{}, err
	}
	if replaced != "" {
		s.dropSnapshotData(ctx, replaced)
	}
	s.log.Info("sandbox snapshotted", "sandbox", id, "snapshot", sn.ID, "bytes", sn.SizeBytes, "paused", info.Paused)
	return sn, nil
}

// snapshotTime returns the creation time of a new snapshot: now, in whole
// milliseconds (the stores keep milliseconds), and later than every snapshot
// this service stamped before, so snapshots taken within one millisecond
// still list newest first (the listing orders by creation time, then by ID,
// which is random).
func (s *Service) snapshotTime() time.Time {
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	t := time.Now().UTC().Truncate(time.Millisecond)
	if !t.After(s.lastSnap) {
		t = s.lastSnap.Add(time.Millisecond)
	}
	s.lastSnap = t
	return t
}

// dropSnapshotData deletes a snapshot in the backend (its data goes once no
// sandbox uses it); a failure is logged: the next start prunes it.
func (s *Service) dropSnapshotData(ctx context.Context, id string) {
	if err := s.backend.DeleteSnapshot(context.WithoutCancel(ctx), id); err != nil {
		s.log.Error("delete snapshot data; pruned at next start", "snapshot", id, "err", err)
	}
}

// deleteSnapshot deletes team's snapshot named by ref (404 when it has none).
func (s *Service) deleteSnapshot(ctx context.Context, team, ref string) error {
	sn, err := s.findSnapshot(ctx, team, ref)
	if err == nil && sn.Internal {
		err = store.ErrNotFound
	}
	if err == nil {
		err = s.store.DeleteSnapshot(ctx, team, sn.ID)
	}
	if errors.Is(err, store.ErrNotFound) {
		return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("template '%s' not found", ref)}
	}
	if err != nil {
		return err
	}
	s.dropSnapshotData(ctx, sn.ID)
	return nil
}

// pruneSnapshots removes what the backend holds of snapshots the store does
// not know (a crash between capture and record).
func (s *Service) pruneSnapshots(ctx context.Context) error {
	ids, err := s.store.SnapshotIDs(ctx)
	if err != nil {
		return err
	}
	if s.keepSnapshots != nil {
		keep, err := s.keepSnapshots(ctx)
		if err != nil {
			return fmt.Errorf("snapshots to keep: %w", err)
		}
		ids = append(ids, keep...)
	}
	return s.backend.PruneSnapshots(ctx, ids)
}

// snapshotRoutes registers the snapshot and fork routes on mux. DELETE
// /templates/{id}, how the SDKs delete a snapshot, is the template API's
// (templateAPI.DeleteTemplate), which deletes the caller's snapshot of that
// ID or name when there is one.
func (h httpAPI) snapshotRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /sandboxes/{sandboxID}/snapshots", h.createSnapshot)
	mux.HandleFunc("GET /snapshots", h.listSnapshots)
	mux.HandleFunc("GET /snapshots/{snapshotID}", h.getSnapshot)
	mux.HandleFunc("POST /sandboxes/{sandboxID}/fork", h.forkSandbox)
}

// createSnapshot implements POST /sandboxes/{id}/snapshots {name?} → 201 snapshotView.
func (h httpAPI) createSnapshot(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name *string `json:"name"`
	}
	if !h.readyDecode(w, r, &b, false) {
		return
	}
	sn, err := h.s.snapshot(r.Context(), r.PathValue("sandboxID"), teamOf(r), deref(b.Name), false)
	h.reply(w, r, http.StatusCreated, viewSnapshot(sn), err)
}

// listSnapshots implements GET /snapshots?sandboxID=&name=&limit=&nextToken=,
// newest first; X-Next-Token names the next page when there is one.
func (h httpAPI) listSnapshots(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	f := store.SnapshotFilter{Team: teamOf(r), SandboxID: q.Get("sandboxID"), After: q.Get("nextToken"), Limit: snapshotListLimit}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > snapshotListLimit {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("limit must be an integer in 1..%d", snapshotListLimit))
			return
		}
		f.Limit = n
	}
	if name := q.Get("name"); name != "" {
		key, ok := snapshotRef(f.Team, name)
		if !ok {
			writeJSON(w, http.StatusOK, []snapshotView{})
			return
		}
		f.Name = key
	}
	f.Limit++ // one more tells whether a next page exists
	list, err := h.s.store.ListSnapshots(r.Context(), f)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(list) == f.Limit {
		list = list[:f.Limit-1]
		w.Header().Set("X-Next-Token", list[len(list)-1].ID)
	}
	writeJSON(w, http.StatusOK, views(list, viewSnapshot))
}

// getSnapshot implements GET /snapshots/{snapshotID}.
func (h httpAPI) getSnapshot(w http.ResponseWriter, r *http.Request) {
	ref := r.PathValue("snapshotID")
	sn, err := h.s.findSnapshot(r.Context(), teamOf(r), ref)
	if errors.Is(err, store.ErrNotFound) || err == nil && sn.Internal {
		writeError(w, http.StatusNotFound, fmt.Sprintf("snapshot '%s' not found", ref))
		return
	}
	h.reply(w, r, http.StatusOK, viewSnapshot(sn), err)
}
