package controlplane

import (
	"net/netip"
	"sort"
)

// Route is what the sandbox gateway needs to forward a request to a sandbox.
type Route struct {
	Addr         netip.Addr // host-reachable address of the sandbox
	HostIface    string     // host interface connections to Addr are bound to (backend.Instance.HostIface)
	Running      bool       // false while paused: the gateway answers 502 (docs/wire/e2b-api.md §1.3)
	AutoResume   bool       // lifecycle.autoResume: traffic to the paused sandbox resumes it (see Wake)
	AccessToken  string     // envd X-Access-Token; "" for unsecured sandboxes
	TrafficToken string     // E2B-Traffic-Access-Token required on non-envd ports; "" = public
	// InterpreterToken is the trafficAccessToken the code interpreter of a
	// secured sandbox takes instead of AccessToken (whether or not its
	// ports are public); "" = none.
	InterpreterToken string
	// MaskRequestHost replaces the Host of requests to the sandbox
	// (network.maskRequestHost, "${PORT}" standing for the port); "" = kept.
	MaskRequestHost string
	HTTPSPorts      []int // ports reached over TLS (network.httpsPorts)
}

// RouteWithID is a Route with its sandbox ID.
type RouteWithID struct {
	ID string
	Route
}

// Route returns the route of a running or paused sandbox from memory (no store
// access; with a shared backend, a sandbox another replica created is adopted
// from the store on its first request here). ok is false for unknown and
// killed sandboxes.
func (s *Service) Route(id string) (Route, bool) {
	sb := s.find(id)
	if sb == nil {
		return Route{}, false
	}
	s.mu.RLock()
	defer s.mu.RUnlock()
	if sb.gone {
		return Route{}, false
	}
	return sb.route, true
}

// Routes returns the routes of every running or paused sandbox, sorted by ID.
func (s *Service) Routes() []RouteWithID {
	s.mu.RLock()
	out := make([]RouteWithID, 0, len(s.live))
	for id, sb := range s.live {
		out = append(out, RouteWithID{ID: id, Route: sb.route})
	}
	s.mu.RUnlock()
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}
