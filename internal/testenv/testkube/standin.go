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
// plane and the cluster, not what runs inside.
type StandIns struct {
	mu    sync.Mutex
	byIP  map[netip.Addr]*http.Server
	inits map[netip.Addr]int
}

// ServeStandIns starts stand-ins for the Pods of ns until t ends.
func (c *Cluster) ServeStandIns(t testing.TB, ns string) *StandIns {
	t.Helper()
	s := &StandIns{byIP: map[netip.Addr]*http.Server{}, inits: map[netip.Addr]int{}}
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
	mux.HandleFunc("GET /ready", ok)
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.inits[ip]++
		s.mu.Unlock()
		ok(w, r)
	})
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(agentapi.Metrics{Timestamp: time.Now().Unix(), CPUCount: 1, MemTotal: 512 << 20})
	})
	return mux
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
