package sdk

import (
	"context"
	"iter"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/sdk/internal/apiclient"
)

// ListOptions filter and page List and NewSandboxPaginator (GET /v2/sandboxes,
// docs/wire/e2b-api.md §2.4). Filters combine with AND.
type ListOptions struct {
	ConnectionOptions
	// Metadata keeps sandboxes whose metadata contains every key/value pair.
	Metadata map[string]string
	// State keeps sandboxes in these states; default running and paused.
	State []SandboxState
	// StartedAfter keeps sandboxes started at or after this instant.
	StartedAfter time.Time
	// Template keeps sandboxes of this template ID or alias.
	Template string
	// Order sorts by start time: "asc" or "desc" (default, newest first).
	Order string
	// Limit is the page size, 1..100; 0 means the server default (100).
	Limit int
	// NextToken starts from a page cursor returned by SandboxPaginator.NextToken.
	NextToken string
}

// SandboxPaginator fetches the pages of a sandbox listing one at a time.
// It is not safe for concurrent use.
type SandboxPaginator struct {
	opts      ListOptions
	nextToken string
	hasNext   bool
}

// NewSandboxPaginator returns a paginator over the sandboxes matching opts
// (nil: all). It makes no request until NextItems.
func NewSandboxPaginator(opts *ListOptions) *SandboxPaginator {
	p := &SandboxPaginator{hasNext: true}
	if opts != nil {
		p.opts = *opts
		p.nextToken = opts.NextToken
	}
	return p
}

// HasNext reports whether another page can be fetched.
func (p *SandboxPaginator) HasNext() bool { return p.hasNext }

// NextToken returns the cursor of the next page ("" when there is none).
func (p *SandboxPaginator) NextToken() string { return p.nextToken }

// NextItems fetches the next page. Errors: *InvalidArgumentError when there
// is no next page or a filter is rejected, and the control-plane errors of
// Create.
func (p *SandboxPaginator) NextItems(ctx context.Context) ([]SandboxInfo, error) {
	if !p.hasNext {
		return nil, &InvalidArgumentError{Message: "no more pages; check HasNext before calling NextItems"}
	}
	params := listParams(&p.opts, p.nextToken)
	var out []SandboxInfo
	err := withControlPlane(&p.opts.ConnectionOptions, func(cp *controlPlane) error {
		page, next, err := cp.list(ctx, params)
		if err != nil {
			return err
		}
		out = make([]SandboxInfo, len(page))
		for i := range page {
			out[i] = infoFromListed(&page[i])
		}
		p.nextToken, p.hasNext = next, next != ""
		return nil
	})
	return out, err
}

// List iterates over every sandbox matching opts (nil: all), fetching pages
// lazily (GET /v2/sandboxes with X-Next-Token paging, docs/wire/e2b-api.md §2.4). An error
// is yielded once, as the last element.
func List(ctx context.Context, opts *ListOptions) iter.Seq2[SandboxInfo, error] {
	return func(yield func(SandboxInfo, error) bool) {
		p := NewSandboxPaginator(opts)
		for p.HasNext() {
			page, err := p.NextItems(ctx)
			if err != nil {
				yield(SandboxInfo{}, err)
				return
			}
			for _, info := range page {
				if !yield(info, nil) {
					return
				}
			}
		}
	}
}

func listParams(o *ListOptions, token string) apiclient.ListSandboxesV2Params {
	var p apiclient.ListSandboxesV2Params
	if len(o.Metadata) > 0 {
		p.Metadata = new(encodeMetadataFilter(o.Metadata))
	}
	if len(o.State) > 0 {
		states := make([]apiclient.SandboxState, len(o.State))
		for i, s := range o.State {
			states[i] = apiclient.SandboxState(s)
		}
		p.State = &states
	}
	if !o.StartedAfter.IsZero() {
		p.StartedAfter = new(o.StartedAfter.UTC())
	}
	if o.Template != "" {
		p.Template = new(o.Template)
	}
	if o.Order != "" {
		p.Order = new(apiclient.ListSandboxesV2ParamsOrder(o.Order))
	}
	if o.Limit > 0 {
		p.Limit = new(int32(o.Limit))
	}
	if token != "" {
		p.NextToken = new(token)
	}
	return p
}

// encodeMetadataFilter builds the metadata query value before the client's
// own query encoding: each key and value escaped and joined as a query string,
// then escaped once more, as the SDKs do (docs/wire/e2b-api.md §2.4).
func encodeMetadataFilter(md map[string]string) string {
	keys := slices.Sorted(maps.Keys(md))
	pairs := make([]string, len(keys))
	for i, k := range keys {
		pairs[i] = uriComponent(uriComponent(k)) + "=" + uriComponent(uriComponent(md[k]))
	}
	return strings.Join(pairs, "&")
}

// uriComponent escapes like JavaScript's encodeURIComponent (space as %20).
func uriComponent(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}
