package testkube

import (
	"encoding/json"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// StandIns answer the agent port of every Pod kwok runs (TierSimulated runs
// nothing): a stand-in listens on the Pod's loopback IP and answers GET
// /health, GET /ready, POST /init and GET /metrics as a booted agent does.
// They are stand-ins, not sandboxes: tests of this tier exercise the control
// plane and the cluster, not what runs inside. Secured stand-ins (Secure)
// check credentials as an agent does.
type StandIns struct {
	mu      sync.Mutex
	byIP    map[netip.Addr]*http.Server
	inits   map[netip.Addr]int
	secured bool
	tokens  map[netip.Addr]string   // the credential each secured stand-in holds
	sent    map[netip.Addr][]string // the X-Access-Token of every request to it
}

// ServeStandIns starts stand-ins for the Pods of ns until t ends.
func (c *Cluster) ServeStandIns(t testing.TB, ns string) *StandIns {
	t.Helper()
	s := &StandIns{byIP: map[netip.Addr]*http.Server{}, inits: map[netip.Addr]int{},
		tokens: map[netip.Addr]string{}, sent: map[netip.Addr][]string{}}
	f := informers.NewSharedInformerFactoryWithOptions(c.Client, 0, informers.WithNamespace(ns))
	inf := f.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.observe(t, obj) },
		UpdateFunc: func(_, obj any) { s.observe(t, obj) },
	})
	stop := make(chan struct{})
	f.Start(stop)
	t.Cleanup(func() {
		close(stop)
		f.Shutdown()
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, srv := range s.byIP {
			_ = srv.Close()
		}
	})
	return s
}

func (s *StandIns) observe(t testing.TB, obj any) {
	pod, ok := obj.(*corev1.Pod)
	if !ok || pod.Status.PodIP == "" {
		return
	}
	ip, err := netip.ParseAddr(pod.Status.PodIP)
	if err != nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.byIP[ip] != nil {
		return
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, agentapi.EnvdPort).String())
	if err != nil {
		t.Errorf("stand-in on %s: %v", ip, err)
		return
	}
	srv := &http.Server{Handler: s.handler(ip), ReadHeaderTimeout: 10 * time.Second}
	s.byIP[ip] = srv
	go func() { _ = srv.Serve(ln) }()
}

func (s *StandIns) handler(ip netip.Addr) http.Handler {
	mux := http.NewServeMux()
	ok := func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }
	mux.HandleFunc("GET /health", ok)
	mux.HandleFunc("GET /ready", s.authorized(ip, ok))
	mux.HandleFunc("POST /init", s.authorized(ip, func(w http.ResponseWriter, r *http.Request) {
		var req agentapi.InitRequest
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		s.inits[ip]++
		if req.AccessToken != "" {
			s.tokens[ip] = req.AccessToken
		}
		s.mu.Unlock()
		ok(w, r)
	}))
	mux.HandleFunc("GET /metrics", s.authorized(ip, func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(agentapi.Metrics{Timestamp: time.Now().Unix(), CPUCount: 1, MemTotal: 512 << 20})
	}))
	mux.HandleFunc("/", s.authorized(ip, func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("stand-in"))
	}))
	return mux
}

// authorized wraps next: a secured stand-in holding a credential answers 401
// to a request without it, as an agent does; every X-Access-Token is recorded.
func (s *StandIns) authorized(ip netip.Addr, next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("X-Access-Token")
		s.mu.Lock()
		s.sent[ip] = append(s.sent[ip], got)
		refused := s.secured && s.tokens[ip] != "" && got != s.tokens[ip]
		s.mu.Unlock()
		if refused {
			http.Error(w, `{"code":401,"message":"invalid access token"}`, http.StatusUnauthorized)
			return
		}
		next(w, r)
	}
}

// Secure makes the stand-ins check credentials from now on: one that holds a
// credential (the last /init's access token, or SetToken's) answers 401 to
// every request but GET /health that does not carry it in X-Access-Token.
func (s *StandIns) Secure() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.secured = true
}

// SetToken makes the stand-in at ip hold token, as an agent an /init gave it
// to does, and forgets the credentials it was sent.
func (s *StandIns) SetToken(ip netip.Addr, token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.tokens[ip] = token
	delete(s.sent, ip)
}

// Token returns the credential the stand-in at ip holds.
func (s *StandIns) Token(ip netip.Addr) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tokens[ip]
}

// Sent returns the X-Access-Token of every request the stand-in at ip got
// (since SetToken), in order; "" for a request without one.
func (s *StandIns) Sent(ip netip.Addr) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent[ip]...)
}

// Inits returns how many inits the stand-ins got in all.
func (s *StandIns) Inits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, v := range s.inits {
		n += v
	}
	return n
}
