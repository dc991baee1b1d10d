package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubby-dev/cubby/internal/template"
)

// ErrTemplateNotFound is returned (wrapped) by a TemplateResolver for an unknown
// template. Create answers it with 404 {"code":404,"message":"template '<x>' not found"}
// (E2B answers an unknown template on create with 404 as well); list answers an
// unknown template filter with 200 [] (docs/wire/e2b-api.md §2.4).
var ErrTemplateNotFound = errors.New("template not found")

// TemplateRef is a resolved template.
type TemplateRef struct {
	ID        string // template ID, returned as templateID
	Alias     string // alias (name) returned as alias; "" for none
	RootfsDir string // absolute path of the immutable rootfs tree
	// Runtime is the OCI runtime the template asks for ("runc", "runsc"); "" =
	// the server's default. Passed on as backend.CreateRequest.Runtime.
	Runtime string
	// User and Workdir are the default user and working directory of the
	// template's sandboxes; "" = "user" and /home/user (docs/wire/envd.md §3.6).
	User, Workdir string
	// Env is the template's environment; a create's envVars override it.
	Env map[string]string
	// StartCmd and ReadyCmd are the template's start and ready commands
	// ("" = none): a create returns once ReadyCmd succeeds.
	StartCmd, ReadyCmd string
	// Team owns the template ("" = every team may use it); Public lets
	// every team use a team's template.
	Team   string
	Public bool
	// Snapshot is the backend snapshot of the template's ready start command
	// (a gVisor memory snapshot taken at build end; template.ReadySnapshots)
	// and SnapshotRuntime the runtime that took it: a create under that
	// runtime without volumes restores it instead of running StartCmd.
	// "" = none.
	Snapshot, SnapshotRuntime string
}

// visibleTo reports whether team may create sandboxes of the template.
func (r TemplateRef) visibleTo(team string) bool { return r.Team == "" || r.Public || r.Team == team }

// TemplateResolver resolves a template ID or alias as sent in templateID.
type TemplateResolver interface {
	// Resolve returns the template for idOrAlias, or an error wrapping
	// ErrTemplateNotFound.
	Resolve(ctx context.Context, idOrAlias string) (TemplateRef, error)
}

// TemplateSource is what the control plane reads of the built templates of
// one host (*template.Manager): a build by ID, name or alias with an optional
// ":tag", every template, and a build's log. Errors of unknown references wrap
// template.ErrNotFound.
type TemplateSource interface {
	Get(ref string) (template.Info, error)
	List() ([]template.Info, error)
	BuildLog(idOrAlias, buildID string) ([]template.BuildLogEntry, error)
}

// BuiltTemplates resolves templates from the built templates of this host,
// the one record of them (their trees and image configs on disk; the template
// API and builds change them there). It implements TemplateResolver and
// TemplateCatalog.
type BuiltTemplates struct {
	Source TemplateSource
}

// Resolve implements TemplateResolver: Alias is the template's name (its
// first alias), whichever of its references was given.
func (t BuiltTemplates) Resolve(_ context.Context, idOrAlias string) (TemplateRef, error) {
	info, err := t.Source.Get(idOrAlias)
	if errors.Is(err, template.ErrNotFound) {
		return TemplateRef{}, fmt.Errorf("template %q: %w", idOrAlias, ErrTemplateNotFound)
	}
	if err != nil {
		return TemplateRef{}, fmt.Errorf("resolve template %q: %w", idOrAlias, err)
	}
	return TemplateRef{ID: info.ID, Alias: info.Name, RootfsDir: info.RootfsDir, Runtime: info.Runtime,
		User: info.User, Workdir: info.Workdir, Env: info.Env, StartCmd: info.StartCmd, ReadyCmd: info.ReadyCmd,
		Team: info.Team, Public: info.Public, Snapshot: info.Snapshot, SnapshotRuntime: info.SnapshotRuntime}, nil
}

// Templates implements TemplateCatalog: every built template, sorted by name.
func (t BuiltTemplates) Templates(context.Context) ([]TemplateListing, error) {
	infos, err := t.Source.List()
	if err != nil {
		return nil, fmt.Errorf("list templates: %w", err)
	}
	out := make([]TemplateListing, 0, len(infos))
	for _, info := range infos {
		out = append(out, TemplateListing{ID: info.ID, BuildID: info.BuildID,
			Aliases: info.Aliases, BuiltAt: info.BuiltAt, SizeBytes: info.SizeBytes})
	}
	return out, nil
}

// BuildLog implements TemplateCatalog.
func (t BuiltTemplates) BuildLog(_ context.Context, idOrAlias, buildID string) ([]BuildLogLine, error) {
	entries, err := t.Source.BuildLog(idOrAlias, buildID)
	if errors.Is(err, template.ErrNotFound) {
		return nil, fmt.Errorf("template %q build %q: %w", idOrAlias, buildID, ErrTemplateNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("template %q build %q: %w", idOrAlias, buildID, err)
	}
	out := make([]BuildLogLine, 0, len(entries))
	for _, e := range entries {
		out = append(out, BuildLogLine{Time: e.Time, Level: e.Level, Message: e.Message})
	}
	return out, nil
}
