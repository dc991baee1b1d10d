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
}

// TemplateResolver resolves a template ID or alias as sent in templateID.
type TemplateResolver interface {
	// Resolve returns the template for idOrAlias, or an error wrapping
	// ErrTemplateNotFound.
	Resolve(ctx context.Context, idOrAlias string) (TemplateRef, error)
}

// StoreTemplates resolves templates from the store's templates table (ID, name
// or alias; see store.FindTemplate).
type StoreTemplates struct {
	Store *store.Store
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
