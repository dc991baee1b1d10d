package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
)

// Volume limits: names as E2B's NewVolume, sizes in MiB (Cubby's `sizeMB`
// extension of the create body; default Config.DefaultVolumeMB).
const (
	volumeNameMaxLen = 128
	minVolumeMB      = 16
	maxVolumeMB      = 1 << 20 // 1 TiB
)

var volumeNames = regexp.MustCompile(`^[a-zA-Z0-9_-]+$`)

// volumeView is a volume as the /volumes routes answer it: E2B's Volume
// (volumeID, name) or VolumeAndToken (plus token, domain), with Cubby's size.
type volumeView struct {
	VolumeID  string  `json:"volumeID"`
	Name      string  `json:"name"`
	Token     string  `json:"token,omitempty"`
	Domain    *string `json:"domain,omitempty"`
	SizeBytes int64   `json:"sizeBytes"`
}

func (s *Service) viewVolume(v store.Volume, withToken bool) volumeView {
	out := volumeView{VolumeID: v.ID, Name: v.Name, SizeBytes: v.SizeBytes}
	if withToken {
		out.Token = v.Token
		if s.cfg.Domain != "" {
			d := s.cfg.Domain
			out.Domain = &d
		}
	}
	return out
}

// createVolume creates a volume of team: 400 for a bad name or size, 409 when
// the team has one of that name.
func (s *Service) createVolume(ctx context.Context, team, name string, sizeMB *int) (store.Volume, error) {
	if len(name) > volumeNameMaxLen || !volumeNames.MatchString(name) {
		return store.Volume{}, badRequest(fmt.Sprintf("invalid volume name %q: want ^[a-zA-Z0-9_-]+$, at most %d characters", name, volumeNameMaxLen))
	}
	mb := s.cfg.DefaultVolumeMB
	if sizeMB != nil {
		mb = *sizeMB
	}
	if mb < minVolumeMB || mb > maxVolumeMB {
		return store.Volume{}, badRequest(fmt.Sprintf("sizeMB must be in %d..%d", minVolumeMB, maxVolumeMB))
	}
	if _, err := s.store.FindVolume(ctx, team, name); err == nil {
		return store.Volume{}, &httpError{status: http.StatusConflict, msg: fmt.Sprintf("volume '%s' already exists", name)}
	}
	v := store.Volume{ID: sandboxid.New(), Team: team, Name: name, Token: newToken(), SizeBytes: int64(mb) << 20,
		CreatedAt: time.Now().UTC().Truncate(time.Millisecond)}
	if err := s.backend.CreateVolume(ctx, v.ID, v.SizeBytes); err != nil {
		return store.Volume{}, fmt.Errorf("create volume: %w", err)
	}
	if err := s.store.InsertVolume(ctx, v); err != nil {
		if derr := s.backend.DeleteVolume(context.WithoutCancel(ctx), v.ID); derr != nil {
			s.log.Error("remove volume after a failed record; pruned at next start", "volume", v.ID, "err", derr)
		}
		if errors.Is(err, store.ErrExists) {
			return store.Volume{}, &httpError{status: http.StatusConflict, msg: fmt.Sprintf("volume '%s' already exists", name)}
		}
		return store.Volume{}, err
	}
	return v, nil
}

// findVolume returns team's volume ref (ID or name) or a 404.
func (s *Service) findVolume(ctx context.Context, team, ref string) (store.Volume, error) {
	v, err := s.store.FindVolume(ctx, team, ref)
	if errors.Is(err, store.ErrNotFound) {
		return store.Volume{}, &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("volume '%s' not found", ref)}
	}
	return v, err
}

// deleteVolume deletes team's volume ref with its files: 404 when unknown,
// 409 while a sandbox mounts it.
func (s *Service) deleteVolume(ctx context.Context, team, ref string) error {
	v, err := s.findVolume(ctx, team, ref)
	if err != nil {
		return err
	}
	err = s.backend.DeleteVolume(ctx, v.ID)
	if errors.Is(err, backend.ErrVolumeInUse) {
		return &httpError{status: http.StatusConflict, msg: fmt.Sprintf("volume '%s' is mounted by a sandbox; kill it first", v.Name)}
	}
	if err != nil {
		return err
	}
	return s.store.DeleteVolume(ctx, team, v.ID)
}

// volumeMounts resolves a create's volumeMounts (by volume name or ID) in
// team into the backend's mounts and the record's: 400 for an unknown volume
// or a bad path.
func (s *Service) volumeMounts(ctx context.Context, team string, in *[]api.SandboxVolumeMount) ([]backend.VolumeMount, []store.VolumeMount, error) {
	if in == nil || len(*in) == 0 {
		return nil, nil, nil
	}
	if v, ok := s.backend.(volumeHolder); ok && !v.CanHoldVolumes() {
		return nil, nil, fmt.Errorf("volumeMounts: volumes are not available with this server's backend (docs/kubernetes.md): %w", backend.ErrNotSupported)
	}
	var out []backend.VolumeMount
	var recs []store.VolumeMount
	seen := map[string]bool{}
	for _, m := range *in {
		if why := backend.ValidVolumePath(m.Path); why != "" {
			return nil, nil, badRequest(fmt.Sprintf("volumeMounts: path %q %s", m.Path, why))
		}
		if seen[m.Path] {
			return nil, nil, badRequest(fmt.Sprintf("volumeMounts: path %q given twice", m.Path))
		}
		seen[m.Path] = true
		v, err := s.store.FindVolume(ctx, team, m.Name)
		if errors.Is(err, store.ErrNotFound) {
			return nil, nil, badRequest(fmt.Sprintf("volumeMounts: volume '%s' not found", m.Name))
		}
		if err != nil {
			return nil, nil, err
		}
		out = append(out, backend.VolumeMount{ID: v.ID, Path: m.Path})
		recs = append(recs, store.VolumeMount{Name: v.Name, Path: m.Path})
	}
	return out, recs, nil
}

// mountsView is a record's volume mounts as the API shows them; nil for none.
func mountsView(in []store.VolumeMount) *[]api.SandboxVolumeMount {
	if len(in) == 0 {
		return nil
	}
	out := make([]api.SandboxVolumeMount, len(in))
	for i, m := range in {
		out[i] = api.SandboxVolumeMount{Name: m.Name, Path: m.Path}
	}
	return &out
}

// pruneVolumes reconciles after a restart: volume data the store does not
// know goes; records whose data is gone (a crash inside a delete) go too.
func (s *Service) pruneVolumes(ctx context.Context) error {
	vols, err := s.store.ListVolumes(ctx, "")
	if err != nil {
		return err
	}
	ids := make([]string, 0, len(vols))
	for _, v := range vols {
		root, err := s.backend.OpenVolume(ctx, v.ID)
		if errors.Is(err, backend.ErrVolumeNotFound) {
			s.log.Warn("volume data gone; dropping its record", "volume", v.ID)
			err = s.store.DeleteVolume(ctx, v.Team, v.ID)
		} else if err == nil {
			ids = append(ids, v.ID)
			err = root.Close()
		}
		if err != nil {
			return err
		}
	}
	return s.backend.PruneVolumes(ctx, ids)
}

// volumeRoutes registers the /volumes routes on mux.
func (h httpAPI) volumeRoutes(mux *http.ServeMux) {
	mux.HandleFunc("POST /volumes", h.postVolume)
	mux.HandleFunc("GET /volumes", h.listVolumes)
	mux.HandleFunc("GET /volumes/{volumeID}", h.getVolume)
	mux.HandleFunc("DELETE /volumes/{volumeID}", h.delVolume)
}

// postVolume implements POST /volumes {name, sizeMB?} → 201 VolumeAndToken.
func (h httpAPI) postVolume(w http.ResponseWriter, r *http.Request) {
	var b struct {
		Name   string `json:"name"`
		SizeMB *int   `json:"sizeMB"`
	}
	if !h.readyDecode(w, r, &b, true) {
		return
	}
	v, err := h.s.createVolume(r.Context(), teamOf(r), b.Name, b.SizeMB)
	h.reply(w, r, http.StatusCreated, h.s.viewVolume(v, true), err)
}

// listVolumes implements GET /volumes → [Volume].
func (h httpAPI) listVolumes(w http.ResponseWriter, r *http.Request) {
	vols, err := h.s.store.ListVolumes(r.Context(), teamOf(r))
	h.reply(w, r, http.StatusOK, views(vols, func(v store.Volume) volumeView { return h.s.viewVolume(v, false) }), err)
}

// getVolume implements GET /volumes/{id} → VolumeAndToken.
func (h httpAPI) getVolume(w http.ResponseWriter, r *http.Request) {
	v, err := h.s.findVolume(r.Context(), teamOf(r), r.PathValue("volumeID"))
	h.reply(w, r, http.StatusOK, h.s.viewVolume(v, true), err)
}

// delVolume implements DELETE /volumes/{id} → 204.
func (h httpAPI) delVolume(w http.ResponseWriter, r *http.Request) {
	if !h.ready(w) {
		return
	}
	if err := h.s.deleteVolume(r.Context(), teamOf(r), r.PathValue("volumeID")); err != nil {
		h.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
