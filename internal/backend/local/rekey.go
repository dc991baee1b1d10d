package local

import (
	"cmp"
	"context"
	"fmt"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// Sandboxes started by a server before the gateway held the client
// credentials run agents initialised with the clients' access token itself
// (agentapi.InitRequest.AccessToken was that token); today's gateway forwards
// only the link credential (agentapi.LinkToken of it), which such an agent
// refuses. Recover re-keys them once: the agent gets an init carrying its
// link credential, authenticated with the token it still holds (the only
// credential an agent of that version accepts for /init), at adoption when it
// runs and at resume when it is paused (frozen, checkpointed or stopped on
// disk).

// adoptCredential converts the state of s, when an older server wrote it,
// to the link credential: Init then holds agentapi.LinkToken of the clients'
// token and Rekey the token its agent still accepts until rekey succeeds.
// MemoryHeldToken records that the running agent's memory (a process of the
// older server's agent) may hold the clients' token. It reports whether s
// changed.
func adoptCredential(s *sandbox) bool {
	if s.Link {
		return false
	}
	s.Link = true
	if tok := s.Init.AccessToken; tok != "" {
		s.Rekey, s.Init.AccessToken, s.Init.TrafficAccessToken = tok, agentapi.LinkToken(tok), ""
		s.MemoryHeldToken = true
	}
	return true
}

// agentToken is the credential s's agent accepts now: the clients' token of
// an agent adopted from an older server until it is re-keyed, otherwise
// Init.AccessToken.
func (s *sandbox) agentToken() string { return cmp.Or(s.Rekey, s.Init.AccessToken) }

// rekey sends the init of s (with its link credential) to its running agent,
// authenticated with the token that agent still holds, and records the
// change. No-op for a sandbox that needs none. The caller holds s.mu or owns
// s alone. Errors: the agent is unreachable or refuses the init (Rekey is
// kept: the next resume tries again), or the state cannot be saved.
func (b *Backend) rekey(ctx context.Context, s *sandbox) error {
	if s.Rekey == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	if err := b.agentClient(s, s.Rekey).Init(ctx, b.initFor(s)); err != nil {
		return fmt.Errorf("re-key the agent of %s (started by an older server): %w", s.ID, err)
	}
	s.Rekey = ""
	if err := b.saveState(s); err != nil {
		return fmt.Errorf("re-key %s: %w", s.ID, err)
	}
	b.log.Info("agent re-keyed to its link credential (sandbox started by an older server)", "sandbox", s.ID)
	return nil
}
