// Package settings holds the agent's sandbox-level configuration, set by the
// control plane through POST /init: default environment variables, default user
// and workdir, the access token that secures the envd protocol and the traffic
// access token the code interpreter accepts too.
package settings

import (
	"crypto/subtle"
	"maps"
	"sync"

	"github.com/cubby-dev/cubby/internal/agent/trust"
	"github.com/cubby-dev/cubby/internal/agentapi"
)

// Settings is safe for concurrent use; the zero value is not usable, call New.
type Settings struct {
	mu           sync.RWMutex
	envVars      map[string]string
	trustEnv     map[string]string // env that makes runtimes trust the egress CA (package trust)
	user         string
	workdir      string
	accessToken  string
	trafficToken string
}

// New returns settings with E2B's defaults (agentapi.DefaultUser and
// DefaultWorkdir), no env vars and no access token.
func New() *Settings {
	return &Settings{envVars: map[string]string{}, user: agentapi.DefaultUser, workdir: agentapi.DefaultWorkdir}
}

// Apply merges an /init request: env vars are replaced when given, the user and
// workdir when non-empty, and the access and traffic tokens whenever the
// request names them.
func (s *Settings) Apply(req agentapi.InitRequest) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if req.EnvVars != nil {
		s.envVars = maps.Clone(req.EnvVars)
	}
	if req.DefaultUser != "" {
		s.user = req.DefaultUser
	}
	if req.DefaultWorkdir != "" {
		s.workdir = req.DefaultWorkdir
	}
	if req.AccessToken != "" {
		s.accessToken = req.AccessToken
	}
	if req.TrafficAccessToken != "" {
		s.trafficToken = req.TrafficAccessToken
	}
	s.trustEnv = nil
	if req.EgressCA != "" {
		s.trustEnv = trust.Env()
	}
}

// EnvVars returns a copy of the sandbox-level environment variables: those of
// /init, and the ones pointing runtimes at the egress CA when the sandbox has
// one (an /init variable of the same name wins, except that one naming the
// host CA bundle names the copy that holds the egress CA too:
// trust.HostBundleEnv).
func (s *Settings) EnvVars() map[string]string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := maps.Clone(s.trustEnv)
	if out == nil {
		return maps.Clone(s.envVars)
	}
	maps.Copy(out, s.envVars)
	trust.HostBundleEnv(out)
	return out
}

// User is the default username.
func (s *Settings) User() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.user
}

// Workdir is the default working directory ("" path and missing cwd resolve to it).
func (s *Settings) Workdir() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.workdir
}

// AccessToken is the token requests must present, "" when the sandbox is unsecured.
func (s *Settings) AccessToken() string {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.accessToken
}

// Secured reports whether an access token is set.
func (s *Settings) Secured() bool { return s.AccessToken() != "" }

// CheckToken reports whether tok matches the access token in constant time.
// With no token set every value (including "") is accepted.
func (s *Settings) CheckToken(tok string) bool {
	want := s.AccessToken()
	if want == "" {
		return true
	}
	return subtle.ConstantTimeCompare([]byte(tok), []byte(want)) == 1
}

// CheckInterpreterToken reports whether a code-interpreter request carrying
// access (its X-Access-Token) and traffic (its E2B-Traffic-Access-Token) may
// proceed: either must equal the sandbox's access or traffic token
// respectively, both compared in constant time. With no access token set
// (unsecured sandbox) every request may; an empty traffic token set never
// matches.
func (s *Settings) CheckInterpreterToken(access, traffic string) bool {
	s.mu.RLock()
	wantAccess, wantTraffic := s.accessToken, s.trafficToken
	s.mu.RUnlock()
	if wantAccess == "" {
		return true
	}
	ok := subtle.ConstantTimeCompare([]byte(access), []byte(wantAccess))
	if wantTraffic != "" {
		ok |= subtle.ConstantTimeCompare([]byte(traffic), []byte(wantTraffic))
	}
	return ok == 1
}
