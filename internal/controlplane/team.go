package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/cubby-dev/cubby/internal/store"
)

// ErrInvalidTeam is returned (wrapped) for a team name that is not 1–63
// characters of [a-z0-9_-] starting with a letter or digit.
var ErrInvalidTeam = errors.New("invalid team name")

var teamName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)

// validTeam checks a team name against ErrInvalidTeam's rule.
func validTeam(team string) error {
	if !teamName.MatchString(team) {
		return fmt.Errorf("%w %q: want 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit", ErrInvalidTeam, team)
	}
	return nil
}

// serverCaller is the caller of lifecycle work the server does on its own (TTL
// expiry, the gateway waking a sandbox with autoResume): it owns every
// sandbox. It cannot be a team name (see validTeam).
const serverCaller = "\x00server"

// owns reports whether caller (a team or serverCaller) may act on a sandbox of
// sandboxTeam. A sandbox of another team is answered exactly like an absent one.
func owns(sandboxTeam, caller string) bool {
	return caller == serverCaller || (caller != "" && sandboxTeam == caller)
}

type teamKey struct{}

// withTeam returns ctx carrying the authenticated team of a request.
func withTeam(ctx context.Context, team string) context.Context {
	return context.WithValue(ctx, teamKey{}, team)
}

// teamOf returns the team authenticate attached to r ("" when none, which
// owns nothing).
func teamOf(r *http.Request) string {
	team, _ := r.Context().Value(teamKey{}).(string)
	return team
}

// recordTeam is the team a store record belongs to.
func recordTeam(r store.Sandbox) string {
	if r.Team == "" {
		return store.DefaultTeam
	}
	return r.Team
}
