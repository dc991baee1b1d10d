package telemetry

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"strconv"
)

// apiMark is the context key of the flag InstrumentAPI sets so that
// InstrumentGateway knows a request went to the API rather than to a sandbox.
type apiMark struct{}

// InstrumentAPI counts requests served by next in cubby_api_requests_total by
// route and status code. The route is the http.ServeMux pattern next matched
// (Request.Pattern, e.g. "GET /sandboxes/{sandboxID}"; nested muxes overwrite
// it on the same request), or "unmatched" for "" and a bare "/" catch-all, so
// the label set stays bounded.
func (m *Metrics) InstrumentAPI(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if p, ok := r.Context().Value(apiMark{}).(*bool); ok {
			*p = true
		}
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" || route == "/" {
			route = "unmatched" // no route, or only a catch-all in front of the API mux
		}
		m.api.WithLabelValues(route, strconv.Itoa(sw.code())).Inc()
	})
}

// InstrumentGateway wraps the server's root handler (the gateway in front of an
// API handler wrapped by InstrumentAPI) and counts the requests that did not
// reach the API in cubby_gateway_requests_total by status class.
func (m *Metrics) InstrumentGateway(next http.Handler) http.Handler {
	if m == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		toAPI := new(bool)
		r = r.WithContext(context.WithValue(r.Context(), apiMark{}, toAPI))
		sw := &statusWriter{ResponseWriter: w}
		next.ServeHTTP(sw, r)
		if !*toAPI {
			m.gateway.WithLabelValues(strconv.Itoa(sw.code()/100) + "xx").Inc()
		}
	})
}

// statusWriter records the status code written through it. It passes Flush,
// Hijack and full-duplex control through (Unwrap, for http.ResponseController).
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush implements http.Flusher.
func (s *statusWriter) Flush() {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// Hijack implements http.Hijacker (protocol upgrades count as 101).
func (s *statusWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	h, ok := s.ResponseWriter.(http.Hijacker)
	if !ok {
		return nil, nil, errors.New("telemetry: response writer cannot hijack")
	}
	if s.status == 0 {
		s.status = http.StatusSwitchingProtocols
	}
	return h.Hijack()
}

// Unwrap returns the wrapped writer (used by http.ResponseController).
func (s *statusWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusWriter) code() int {
	if s.status == 0 {
		return http.StatusOK
	}
	return s.status
}
