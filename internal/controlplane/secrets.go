package controlplane

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"golang.org/x/net/http/httpguts"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/store"
)

// Sealer encrypts values at rest with the server's key (package secretbox):
// secret values and the credentials of sandboxes' network configs.
type Sealer interface {
	// Seal encrypts plaintext bound to ad.
	Seal(plaintext, ad []byte) []byte
	// Open decrypts what Seal made with the same ad.
	Open(sealed, ad []byte) ([]byte, error)
}

// Limits of secrets (E2B's SecretMetadata limits; values go into HTTP headers).
const (
	maxSecretValue     = 16 << 10
	maxSecretMetaKeys  = 32
	maxSecretMetaKey   = 128
	maxSecretMetaValue = 1024
	maxSecretMetaTotal = 8192
	defaultSecretPage  = 100
)

// secretAD binds a sealed secret value to its team and ID.
func secretAD(team, id string) []byte { return []byte("secret\x00" + team + "\x00" + id) }

// secretView is the Secret body: metadata only, never the value.
func secretView(sec store.Secret) api.Secret {
	return api.Secret{SecretID: sec.ID, Name: sec.Name, CurrentVersion: sec.Version,
		Metadata: sec.Metadata, CreatedAt: sec.CreatedAt.UTC(), UpdatedAt: sec.UpdatedAt.UTC()}
}

func (h httpAPI) sealer(w http.ResponseWriter) bool {
	if h.s.sealer == nil {
		writeError(w, http.StatusNotImplemented, "secrets are not available: the server has no secret key")
		return false
	}
	return true
}

// CreateSecret implements POST /secrets: 201 Secret; 400 for a bad name,
// value or metadata; 409 when the team has a secret of that name.
func (h httpAPI) CreateSecret(w http.ResponseWriter, r *http.Request) {
	var b api.NewSecret
	if !h.sealer(w) {
		return
	}
	if err := decodeBody(w, r, &b, true); err != nil {
		h.fail(w, r, err)
		return
	}
	if err := validSecret(b.Name, b.Value, b.Metadata); err != nil {
		h.fail(w, r, err)
		return
	}
	team, now := teamOf(r), time.Now().UTC().Truncate(time.Millisecond)
	sec := store.Secret{ID: policy.SecretIDPrefix + randomHex(12), Team: team, Name: strings.ToLower(b.Name),
		Metadata: metaOrEmpty(b.Metadata), Version: 1, CreatedAt: now, UpdatedAt: now}
	sec.Sealed = h.s.sealer.Seal([]byte(b.Value), secretAD(team, sec.ID))
	err := h.s.store.InsertSecret(r.Context(), sec)
	if errors.Is(err, store.ErrConflict) {
		err = &httpError{status: http.StatusConflict, msg: fmt.Sprintf("a secret named %q exists", sec.Name)}
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.s.log.Info("secret created", "secret", sec.ID, "team", team)
	writeJSON(w, http.StatusCreated, secretView(sec))
}

// ListSecrets implements GET /secrets?limit&nextToken: the team's secrets by
// name, X-Next-Token when more follow.
func (h httpAPI) ListSecrets(w http.ResponseWriter, r *http.Request, p api.ListSecretsParams) {
	limit, after := defaultSecretPage, ""
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > defaultSecretPage {
			h.fail(w, r, badRequest("limit must be 1-100"))
			return
		}
		limit = int(*p.Limit)
	}
	if p.NextToken != nil && *p.NextToken != "" {
		raw, err := base64.RawURLEncoding.DecodeString(*p.NextToken)
		if err != nil {
			h.fail(w, r, badRequest("invalid nextToken"))
			return
		}
		after = string(raw)
	}
	secs, err := h.s.store.ListSecrets(r.Context(), teamOf(r), after, limit+1)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	if len(secs) > limit {
		secs = secs[:limit]
		w.Header().Set("X-Next-Token", base64.RawURLEncoding.EncodeToString([]byte(secs[limit-1].Name)))
	}
	out := make([]api.Secret, 0, len(secs))
	for _, sec := range secs {
		out = append(out, secretView(sec))
	}
	writeJSON(w, http.StatusOK, out)
}

// GetSecret implements GET /secrets/{idOrName}: 404 for other teams' secrets.
func (h httpAPI) GetSecret(w http.ResponseWriter, r *http.Request, idOrName api.SecretID) {
	sec, err := h.secret(r, idOrName)
	if err != nil {
		h.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, secretView(sec))
}

// UpdateSecret implements POST /secrets/{idOrName}: the next version of the
// value (metadata replaced when given); 200 Secret.
func (h httpAPI) UpdateSecret(w http.ResponseWriter, r *http.Request, idOrName api.SecretID) {
	var b api.SecretUpdate
	if !h.sealer(w) {
		return
	}
	if err := decodeBody(w, r, &b, true); err != nil {
		h.fail(w, r, err)
		return
	}
	sec, err := h.secret(r, idOrName)
	if err == nil {
		err = validSecret(sec.Name, b.Value, b.Metadata)
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	var meta map[string]string
	if b.Metadata != nil {
		meta = metaOrEmpty(b.Metadata)
	}
	sealed := h.s.sealer.Seal([]byte(b.Value), secretAD(sec.Team, sec.ID))
	sec, err = h.s.store.UpdateSecret(r.Context(), sec.Team, sec.ID, sealed, meta, time.Now())
	if errors.Is(err, store.ErrNotFound) {
		err = secretNotFound(string(idOrName))
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.s.log.Info("secret updated", "secret", sec.ID, "version", sec.Version)
	writeJSON(w, http.StatusOK, secretView(sec))
}

// DeleteSecret implements DELETE /secrets/{idOrName}: 204; rules that use it
// then fail closed at egress.
func (h httpAPI) DeleteSecret(w http.ResponseWriter, r *http.Request, idOrName api.SecretID) {
	sec, err := h.secret(r, idOrName)
	if err == nil {
		err = h.s.store.DeleteSecret(r.Context(), sec.Team, sec.ID)
	}
	if errors.Is(err, store.ErrNotFound) {
		err = secretNotFound(string(idOrName))
	}
	if err != nil {
		h.fail(w, r, err)
		return
	}
	h.s.dropKilledSecrets(r.Context())
	h.s.log.Info("secret deleted", "secret", sec.ID)
	w.WriteHeader(http.StatusNoContent)
}

// secret returns the caller's team's secret idOrName or a 404.
func (h httpAPI) secret(r *http.Request, idOrName api.SecretID) (store.Secret, error) {
	sec, err := h.s.store.GetSecret(r.Context(), teamOf(r), string(idOrName))
	if errors.Is(err, store.ErrNotFound) {
		return store.Secret{}, secretNotFound(string(idOrName))
	}
	return sec, err
}

func secretNotFound(idOrName string) error {
	return &httpError{status: http.StatusNotFound, msg: fmt.Sprintf("secret %q not found", idOrName)}
}

func metaOrEmpty(m *api.SecretMetadata) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return *m
}

// validSecret checks a secret's name, value and metadata (400 naming the field).
func validSecret(name, value string, meta *api.SecretMetadata) error {
	if err := policy.ValidSecretName(name); err != nil {
		return badRequest("name: " + err.Error())
	}
	switch {
	case value == "":
		return badRequest("value must not be empty")
	case len(value) > maxSecretValue:
		return badRequest(fmt.Sprintf("value: at most %d bytes", maxSecretValue))
	case !utf8.ValidString(value) || !httpguts.ValidHeaderFieldValue(value):
		return badRequest("value: it is sent in HTTP headers, so it must be UTF-8 without CR, LF, NUL or other control characters")
	}
	if meta == nil {
		return nil
	}
	total := 0
	for k, v := range *meta {
		total += len(k) + len(v)
		if k == "" || len(k) > maxSecretMetaKey || len(v) > maxSecretMetaValue {
			return badRequest(fmt.Sprintf("metadata[%q]: keys are 1-%d bytes, values at most %d", k, maxSecretMetaKey, maxSecretMetaValue))
		}
	}
	if len(*meta) > maxSecretMetaKeys || total > maxSecretMetaTotal {
		return badRequest(fmt.Sprintf("metadata: at most %d entries and %d bytes", maxSecretMetaKeys, maxSecretMetaTotal))
	}
	return nil
}

// SecretValue returns the current value of team's secret name, for the egress
// proxy filling in a rule's ${e2b.secrets.NAME}. Errors wrap
// policy.ErrUnknownSecret when the team has no such secret (deleted since the
// rule was set).
func (s *Service) SecretValue(ctx context.Context, team, name string) (string, error) {
	if s.sealer == nil {
		return "", errors.New("the server has no secret key")
	}
	sec, err := s.store.GetSecret(ctx, team, name)
	if errors.Is(err, store.ErrNotFound) {
		return "", fmt.Errorf("secret %q: %w", name, policy.ErrUnknownSecret)
	}
	if err != nil {
		return "", err
	}
	v, err := s.sealer.Open(sec.Sealed, secretAD(sec.Team, sec.ID))
	if err != nil {
		return "", fmt.Errorf("open secret %s: %w", sec.ID, err)
	}
	return string(v), nil
}

// missingSecrets returns the names among names that team has no secret for.
func (s *Service) missingSecrets(ctx context.Context, team string, names []string) ([]string, error) {
	var missing []string
	for _, n := range names {
		_, err := s.store.GetSecret(ctx, team, n)
		if errors.Is(err, store.ErrNotFound) {
			missing = append(missing, n)
		} else if err != nil {
			return nil, err
		}
	}
	return missing, nil
}
