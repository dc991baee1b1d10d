// Package security re-enacts, against the real `cubby serve` binary (CUBBY_BIN)
// with real sandboxes, what an attacker inside a sandbox (root, through sudo or
// the SDK's user "root") or a holder of another team's API key tries, and
// checks that each attempt is refused or contained while neighbours and the
// host keep working. Every test drives the server through its public wire
// protocol with the Go SDK (package sdk), as a user would.
//
// SECURITY.md at the repository root describes the boundary these tests hold
// and lists which test covers which finding.
package security
