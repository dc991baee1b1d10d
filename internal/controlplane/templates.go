package controlplane

import (
	"context"
	"errors"
	"fmt"

	"github.com/cubby-dev/cubby/internal/store"
)

// ErrTemplateNotFound is returned (wrapped) by a TemplateResolver for an unknown
// template. Create answers it with 404 {"code":404,"message":"template '<x>' not found"}
// (E2B answers an unknown template on create with 404 as well); list answers an
// unknown template filter with 200 [] (E2B wire §2.4).
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
	// template's sandboxes; "" = "user" and /home/user (E2B wire §3.6).
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
}

// visibleTo reports whether team may create sandboxes of the template.
func (r TemplateRef) visibleTo(team string) bool { return r.Team == "" || r.Public || r.Team == team }

// TemplateResolver resolves a template ID or alias as sent in templateID.
type TemplateResolver interface {
	// Resolve returns the template for idOrAlias, or an error wrapping
	// ErrTemplateNotFound.
	Resolve(ctx context.Context, idOrAlias string) (TemplateRef, error)
}

// StoreTemplates resolves templates from the store's templates table (ID, name
// or alias; see store.FindTemplate).
type StoreTemplates struct {
	Store TemplateFinder
}

// Resolve implements TemplateResolver. Alias is the reference itself when it was
// not the ID, else the template's name.
func (t StoreTemplates) Resolve(ctx context.Context, idOrAlias string) (TemplateRef, error) {
	tpl, err := t.Store.FindTemplate(ctx, idOrAlias)
	if errors.Is(err, store.ErrNotFound) {
		return TemplateRef{}, fmt.Errorf("template %q: %w", idOrAlias, ErrTemplateNotFound)
	}
	if err != nil {
		return TemplateRef{}, fmt.Errorf("resolve template %q: %w", idOrAlias, err)
	}
	alias := tpl.Name
	if idOrAlias != tpl.ID {
		alias = idOrAlias
	}
	return TemplateRef{ID: tpl.ID, Alias: alias, RootfsDir: tpl.RootfsDir}, nil
}
