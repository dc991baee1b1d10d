package backend

import "time"

// EventKind says what changed about a sandbox in an Event.
type EventKind int

// Event kinds.
const (
	// EventUp: the sandbox runs and is reachable at Event.Instance.Addr.
	EventUp EventKind = iota + 1
	// EventDeadline: the sandbox's recorded deadline became Event.Deadline.
	EventDeadline
	// EventGone: the sandbox no longer runs, for Event.Reason.
	EventGone
)

// Event is a change to a sandbox that a backend shared by several control
// planes observed, whichever of them (or the cluster itself) caused it.
type Event struct {
	Kind      EventKind
	SandboxID string
	Instance  Instance  // EventUp
	Deadline  time.Time // EventDeadline
	Reason    string    // EventGone
}
