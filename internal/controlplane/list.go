package controlplane

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/api"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store"
)

// List page size bounds (docs/wire/e2b-api.md §2.4).
const (
	defaultListLimit = 100
	maxListLimit     = 100
)

// listQuery is a validated GET /v2/sandboxes query.
type listQuery struct {
	metadata     map[string]string
	states       []store.State
	template     string
	startedAfter time.Time // truncated to ms; zero = none
	descending   bool
	after        *store.Cursor
	limit        int
}

// parseListQuery validates the bound query parameters of GET /v2/sandboxes
// (docs/wire/e2b-api.md §2.4). Every error is a 400.
func parseListQuery(p api.ListSandboxesV2Params) (listQuery, error) {
	q := listQuery{descending: true, limit: defaultListLimit}
	var err error
	if p.Metadata != nil {
		if q.metadata, err = decodeMetadataFilter(*p.Metadata); err != nil {
			return listQuery{}, badRequest(err.Error())
		}
	}
	if q.states, err = parseStates(p.State); err != nil {
		return listQuery{}, err
	}
	if p.Template != nil {
		if strings.Contains(*p.Template, ":") {
			return listQuery{}, badRequest("the template filter does not accept a ':tag'")
		}
		q.template = *p.Template
	}
	if p.StartedAfter != nil {
		q.startedAfter = p.StartedAfter.UTC().Truncate(time.Millisecond)
	}
	if p.Order != nil {
		if !p.Order.Valid() {
			return listQuery{}, badRequest(fmt.Sprintf("invalid order %q: want asc or desc", *p.Order))
		}
		q.descending = *p.Order == api.Desc
	}
	if p.Limit != nil {
		if *p.Limit < 1 || *p.Limit > maxListLimit {
			return listQuery{}, badRequest(fmt.Sprintf("limit must be between 1 and %d", maxListLimit))
		}
		q.limit = int(*p.Limit)
	}
	if p.NextToken != nil && *p.NextToken != "" {
		c, err := decodeNextToken(*p.NextToken)
		if err != nil {
			return listQuery{}, badRequest(err.Error())
		}
		q.after = &c
	}
	return q, nil
}

func parseStates(p *[]api.SandboxState) ([]store.State, error) {
	if p == nil {
		return []store.State{store.StateRunning, store.StatePaused}, nil
	}
	seen := map[store.State]bool{}
	var out []store.State
	for _, st := range *p {
		if st == "" {
			continue
		}
		if !st.Valid() {
			return nil, badRequest(fmt.Sprintf("invalid state %q: want running or paused", st))
		}
		if !seen[store.State(st)] {
			seen[store.State(st)] = true
			out = append(out, store.State(st))
		}
	}
	if len(out) == 0 {
		return []store.State{store.StateRunning, store.StatePaused}, nil
	}
	return out, nil
}

// decodeMetadataFilter decodes the `metadata` query value after the normal query
// decoding (docs/wire/e2b-api.md §2.4): unescape it once more, split on '&' and then on the
// first '=', and unescape each key and value once more. Empty pairs are skipped;
// a pair without '=', an empty key, a duplicate key or a bad escape is an error.
func decodeMetadataFilter(raw string) (map[string]string, error) {
	inner, err := url.QueryUnescape(raw)
	if err != nil {
		return nil, fmt.Errorf("invalid metadata filter: %w", err)
	}
	out := map[string]string{}
	for pair := range strings.SplitSeq(inner, "&") {
		if pair == "" {
			continue
		}
		ek, ev, ok := strings.Cut(pair, "=")
		if !ok {
			return nil, fmt.Errorf("invalid metadata filter: %q has no '='", pair)
		}
		k, err := url.QueryUnescape(ek)
		if err != nil {
			return nil, fmt.Errorf("invalid metadata filter key: %w", err)
		}
		v, err := url.QueryUnescape(ev)
		if err != nil {
			return nil, fmt.Errorf("invalid metadata filter value: %w", err)
		}
		if k == "" {
			return nil, errors.New("invalid metadata filter: empty key")
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("invalid metadata filter: duplicate key %q", k)
		}
		out[k] = v
	}
	return out, nil
}

// tokenSep separates the fields of a next token; sandbox IDs never contain '_'.
const tokenSep = "__"

// encodeNextToken returns the opaque cursor for the position after c:
// unpadded base64url of "<RFC3339Nano startedAt>__<sandboxID>".
func encodeNextToken(c store.Cursor) string {
	raw := c.StartedAt.UTC().Format(time.RFC3339Nano) + tokenSep + c.ID
	return base64.RawURLEncoding.EncodeToString([]byte(raw))
}

// decodeNextToken parses a token made by encodeNextToken (padding tolerated).
func decodeNextToken(tok string) (store.Cursor, error) {
	raw, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(tok, "="))
	if err != nil {
		return store.Cursor{}, errors.New("invalid nextToken")
	}
	ts, id, ok := strings.Cut(string(raw), tokenSep)
	if !ok || !sandboxid.Valid(id) {
		return store.Cursor{}, errors.New("invalid nextToken")
	}
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return store.Cursor{}, errors.New("invalid nextToken")
	}
	return store.Cursor{StartedAt: t.UTC(), ID: id}, nil
}

// list runs a validated query over team's sandboxes and returns one page and
// the next token ("" on the last page). An unknown template matches nothing.
func (s *Service) list(ctx context.Context, team string, q listQuery) ([]store.Sandbox, string, error) {
	f := store.SandboxFilter{
		Team: team, States: q.states, StartedAfter: q.startedAfter, Metadata: q.metadata,
		Descending: q.descending, After: q.after, Limit: q.limit + 1,
	}
	if q.template != "" {
		f.Templates = []string{q.template}
		ref, err := s.templates.Resolve(ctx, q.template)
		switch {
		case err == nil && ref.ID != q.template:
			f.Templates = append(f.Templates, ref.ID)
		case err != nil && !errors.Is(err, ErrTemplateNotFound):
			return nil, "", fmt.Errorf("resolve template %q: %w", q.template, err)
		}
	}
	recs, err := s.store.ListSandboxes(ctx, f)
	if err != nil {
		return nil, "", err
	}
	if len(recs) <= q.limit {
		return recs, "", nil
	}
	recs = recs[:q.limit]
	last := recs[len(recs)-1]
	return recs, encodeNextToken(store.Cursor{StartedAt: last.StartedAt, ID: last.ID}), nil
}
