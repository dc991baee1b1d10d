package kube

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// Labels of sandbox Pods (selectors: the informer, NetworkPolicies, pools).
const (
	// LabelManagedBy marks every Pod Cubby made (value "cubby").
	LabelManagedBy = "app.kubernetes.io/managed-by"
	// LabelSandbox is "true" on every sandbox Pod (NetworkPolicy selector).
	LabelSandbox = "cubby.dev/sandbox"
	// LabelID is the sandbox ID ([a-z0-9]{20}); the Pod is named PodPrefix+ID.
	LabelID = "cubby.dev/id"
	// LabelTemplate is the template ID.
	LabelTemplate = "cubby.dev/template"
	// LabelTeam is the owning team (or "h-" and a hash when the team name is
	// not a valid label value); absent on warm Pods.
	LabelTeam = "cubby.dev/team"
	// LabelState is the pool state: StateBooting, StateWarm or StateClaimed.
	LabelState = "cubby.dev/state"
	// LabelPoolKey groups interchangeable warm Pods (image, runtime, limits, boot options).
	LabelPoolKey = "cubby.dev/pool-key"
	// LabelInternet is "true" when the sandbox may reach public addresses
	// (the internet NetworkPolicy selects it), "false" otherwise.
	LabelInternet = "cubby.dev/internet"
)

// Annotations of sandbox Pods.
const (
	// AnnDeadline is the sandbox's deadline (RFC 3339, UTC).
	AnnDeadline = "cubby.dev/deadline"
	// AnnMetadata is the create request's metadata (JSON object).
	AnnMetadata = "cubby.dev/metadata"
	// AnnRuntime is the runtime name the create request asked for.
	AnnRuntime = "cubby.dev/runtime"
	// AnnClaimedAt is when a replica claimed (or cold-created) the Pod (RFC 3339).
	AnnClaimedAt = "cubby.dev/claimed-at"
	// AnnReplica is the replica that claimed or created the Pod.
	AnnReplica = "cubby.dev/replica"
	// AnnLink is "true" on a sandbox Pod whose agent holds its link
	// credential (agentapi.LinkToken), set by a cold create and a claim with
	// the claim's metadata, before the agent's /init, and by Rekey. A claimed
	// Pod without it was initialised by a replica of an older release, with
	// the clients' access token itself (docs/kubernetes.md, upgrades).
	AnnLink = "cubby.dev/link"
)

// Values of LabelState and LabelManagedBy, and the Pod name prefix.
const (
	StateBooting = "booting" // a warm Pod whose agent is starting its code contexts
	StateWarm    = "warm"    // a warm Pod ready to be claimed
	StateClaimed = "claimed" // a sandbox (claimed from a pool or created cold)
	managedBy    = "cubby"
	PodPrefix    = "sbx-"
	// containerName is the sandbox container of every Pod.
	containerName = "sandbox"
	// agentPath is where templates exported by `cubby template export` hold the agent.
	agentPath = agentapi.AgentPath
	envdPort  = agentapi.EnvdPort
)

// podName is the Pod of sandbox id.
func podName(id string) string { return PodPrefix + id }

// teamLabel returns team as a label value: itself when valid, else "h-" and
// the first 16 hex digits of its SHA-256.
func teamLabel(team string) string {
	if len(validation.IsValidLabelValue(team)) == 0 {
		return team
	}
	return "h-" + hashLabel(team)
}

// hashLabel is a label value standing for parts: 16 hex digits of the
// SHA-256 of them joined with NUL.
func hashLabel(parts ...string) string {
	sum := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(sum[:8])
}

// boolLabel is "true" or "false".
func boolLabel(v bool) string {
	if v {
		return "true"
	}
	return "false"
}

// idOf returns the sandbox ID of a Pod name, "" for other names.
func idOf(name string) string {
	id, ok := strings.CutPrefix(name, PodPrefix)
	if !ok {
		return ""
	}
	return id
}

// claimedSelector selects claimed sandbox Pods in the informer cache.
func claimedSelector() labels.Selector {
	return labels.SelectorFromSet(labels.Set{LabelState: StateClaimed})
}
