package controlplane

// Kill reasons as metric labels (cubby_sandbox_kills_total{reason}): a small,
// fixed set, unlike the free-text reasons recorded in the store.
const (
	killLabelRequest      = "request"
	killLabelTimeout      = "timeout"
	killLabelGone         = "gone"
	killLabelLost         = "lost"
	killLabelCreateFailed = "create_failed"
)

// killLabel maps a store kill reason to its metric label.
func killLabel(reason string) string {
	switch reason {
	case reasonRequest:
		return killLabelRequest
	case reasonTimeout:
		return killLabelTimeout
	case reasonGone:
		return killLabelGone
	case reasonLost:
		return killLabelLost
	default:
		return "other"
	}
}

// SandboxStates counts live sandboxes by state ("running", "paused") from
// memory; it implements telemetry.StateCounter for the cubby_sandboxes gauge.
func (s *Service) SandboxStates() map[string]int {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := map[string]int{"running": 0, "paused": 0}
	for _, sb := range s.live {
		if sb.gone {
			continue
		}
		if sb.route.Running {
			out["running"]++
		} else {
			out["paused"]++
		}
	}
	return out
}
