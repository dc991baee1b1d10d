package sdk

import (
	"context"
	"errors"
	"maps"
	"net/http"
	"time"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// ResourceSecret is the NotFoundError.Resource of secrets.
const ResourceSecret = "secret"

// SecretPlaceholder returns "${e2b.secrets.NAME}": in a network rule's header
// value the egress proxy replaces it with the secret's value as the request
// leaves the host (the sandbox never sees it). No call is made.
func SecretPlaceholder(name string) string { return "${e2b.secrets." + name + "}" }

// SecretInfo describes a secret; values are write-only and never returned.
type SecretInfo struct {
	ID       string
	Name     string
	Version  int64
	Metadata map[string]string
	Created  time.Time
	Updated  time.Time
}

func secretInfo(s apiclient.Secret) SecretInfo {
	return SecretInfo{ID: s.SecretID, Name: s.Name, Version: s.CurrentVersion, Metadata: maps.Clone(s.Metadata),
		Created: s.CreatedAt, Updated: s.UpdatedAt}
}

// secretsClient returns the control-plane client for opts.
func secretsClient(opts ConnectionOptions) (*controlPlane, func(), error) {
	cfg := opts.resolve()
	hc, closeIdle := cfg.newHTTPClient()
	cp, err := newControlPlane(&cfg, hc)
	if err != nil {
		closeIdle()
		return nil, nil, err
	}
	return cp, closeIdle, nil
}

// secretCall runs one /secrets request and decodes a Secret answer.
func secretCall(ctx context.Context, opts ConnectionOptions, op, id string, ok int,
	do func(*apiclient.Client, context.Context) (*http.Response, error)) (*SecretInfo, error) {
	cp, done, err := secretsClient(opts)
	if err != nil {
		return nil, err
	}
	defer done()
	_, _, b, err := cp.call(ctx, op, "", []int{ok}, func(ctx context.Context) (*http.Response, error) { return do(cp.client, ctx) })
	var nf *NotFoundError
	if errors.As(err, &nf) {
		nf.Resource, nf.ID = ResourceSecret, id
	}
	if err != nil || ok == http.StatusNoContent {
		return nil, err
	}
	var s apiclient.Secret
	if err := decodeBody(op, b, &s); err != nil {
		return nil, err
	}
	info := secretInfo(s)
	return &info, nil
}

// CreateSecret stores a new secret of the API key's team (POST /secrets).
// Errors: *InvalidArgumentError (bad name or value), *APIError 409 (the name
// exists), control-plane errors.
func CreateSecret(ctx context.Context, opts ConnectionOptions, name, value string, metadata map[string]string) (*SecretInfo, error) {
	body := apiclient.NewSecret{Name: name, Value: value}
	if metadata != nil {
		body.Metadata = new(apiclient.SecretMetadata(metadata))
	}
	return secretCall(ctx, opts, "create secret", name, http.StatusCreated, func(c *apiclient.Client, ctx context.Context) (*http.Response, error) {
		return c.CreateSecret(ctx, body)
	})
}

// UpdateSecret stores value as the next version of secret idOrName; metadata
// replaces the old when not nil. Errors: *NotFoundError, control-plane errors.
func UpdateSecret(ctx context.Context, opts ConnectionOptions, idOrName, value string, metadata map[string]string) (*SecretInfo, error) {
	body := apiclient.SecretUpdate{Value: value}
	if metadata != nil {
		body.Metadata = new(apiclient.SecretMetadata(metadata))
	}
	return secretCall(ctx, opts, "update secret", idOrName, http.StatusOK, func(c *apiclient.Client, ctx context.Context) (*http.Response, error) {
		return c.UpdateSecret(ctx, idOrName, body)
	})
}

// GetSecret describes secret idOrName. Errors: *NotFoundError, control-plane errors.
func GetSecret(ctx context.Context, opts ConnectionOptions, idOrName string) (*SecretInfo, error) {
	return secretCall(ctx, opts, "get secret", idOrName, http.StatusOK, func(c *apiclient.Client, ctx context.Context) (*http.Response, error) {
		return c.GetSecret(ctx, idOrName)
	})
}

// DeleteSecret deletes secret idOrName; false when there was none.
func DeleteSecret(ctx context.Context, opts ConnectionOptions, idOrName string) (bool, error) {
	_, err := secretCall(ctx, opts, "delete secret", idOrName, http.StatusNoContent, func(c *apiclient.Client, ctx context.Context) (*http.Response, error) {
		return c.DeleteSecret(ctx, idOrName)
	})
	var nf *NotFoundError
	if errors.As(err, &nf) {
		return false, nil
	}
	return err == nil, err
}

// ListSecrets returns every secret of the API key's team, by name.
func ListSecrets(ctx context.Context, opts ConnectionOptions) ([]SecretInfo, error) {
	cp, done, err := secretsClient(opts)
	if err != nil {
		return nil, err
	}
	defer done()
	var out []SecretInfo
	p := apiclient.ListSecretsParams{}
	for {
		_, h, b, err := cp.call(ctx, "list secrets", "", []int{http.StatusOK}, func(ctx context.Context) (*http.Response, error) {
			return cp.client.ListSecrets(ctx, &p)
		})
		if err != nil {
			return nil, err
		}
		var page []apiclient.Secret
		if err := decodeBody("list secrets", b, &page); err != nil {
			return nil, err
		}
		for _, s := range page {
			out = append(out, secretInfo(s))
		}
		next := h.Get("X-Next-Token")
		if next == "" {
			return out, nil
		}
		p.NextToken = &next
	}
}
