// Package kube is the Kubernetes backend of Cubby: one Pod per sandbox in one
// namespace, driven with client-go. Several `cubby serve` replicas share it;
// the Kubernetes API is the source of truth for what runs, and every replica
// watches the sandbox Pods through one shared informer (label selector
// app.kubernetes.io/managed-by=cubby), from which it routes by Pod IP (no
// Service per sandbox) and learns what other replicas and the cluster did.
//
// A sandbox Pod runs the template's OCI image (cubby template export: the
// template tree plus the agent baked in at /opt/cubby/bin/cubby) with the agent
// as PID 1, under the configured RuntimeClass, without a service account token,
// in a user namespace (hostUsers: false) when configured, with the create
// request's limits, a readiness probe on envd's /health and restartPolicy
// Never (an agent that dies ends the sandbox, which is then reported killed
// with the reason). NetworkPolicies admit traffic to sandbox Pods only from the
// replicas and let those with internet access reach public addresses only
// (policy.go). Warm pools are labelled Pods claimed by a resourceVersion-
// preconditioned update (pool.go). Pods this release initialises carry
// AnnLink; Rekey gives the agents of Pods an older release initialised with
// the clients' token their link credential (rekey.go, docs/kubernetes.md).
//
// Kubernetes cannot pause a process tree in memory: Pause and Resume answer
// backend.ErrNotSupported and CanPause is false (docs/kubernetes.md).
package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/cubby-dev/cubby/internal/backend"
)

// Config configures the backend. Namespace and Images are required.
type Config struct {
	// Namespace holds the sandbox Pods, the NetworkPolicies and the leader Lease.
	Namespace string
	// Images maps a template ID to the image reference its sandboxes run.
	Images map[string]string
	// RuntimeClasses maps a runtime name of a create request ("" = the
	// default, "runc", "runsc") to a RuntimeClass ("" = the cluster's default
	// handler). A name with no entry uses the "" entry.
	RuntimeClasses map[string]string
	// UserNamespaces runs sandbox Pods with hostUsers: false (Kubernetes user
	// namespaces; the node's runtime must support them).
	UserNamespaces bool
	// ImagePullPolicy of sandbox containers; default IfNotPresent.
	ImagePullPolicy corev1.PullPolicy
	// PendingTimeout: a sandbox Pod not running by then is deleted and its
	// create fails (unschedulable, image not pullable ...); default 2 min.
	PendingTimeout time.Duration
	// DNS are the sandboxes' nameservers (dnsPolicy None: sandboxes do not see
	// the cluster's DNS); default 1.1.1.1 and 8.8.8.8.
	DNS []string
	// EgressExcept are the CIDRs a sandbox with internet access still cannot
	// reach (NetworkPolicy ipBlock except); default DefaultEgressExcept.
	EgressExcept []string
	// ReplicaSelector selects the replicas' Pods, the only ones admitted to
	// sandbox Pods; default app.kubernetes.io/name=cubby.
	ReplicaSelector map[string]string
	// CPURequest and MemoryRequestMB are each sandbox Pod's requests (what the
	// scheduler reserves; limits come from the create request); default 100m
	// and 128 MiB.
	CPURequest      string
	MemoryRequestMB int
	// NodeLostToleration is how long a sandbox Pod stays bound to a node that
	// is not ready or unreachable before the cluster evicts it (and the
	// sandbox is reported killed); default 30 s.
	NodeLostToleration time.Duration
	// Identity names this replica in Pod annotations (its Pod name).
	Identity string
	// OrphanGrace: a claimed Pod without a record is deleted once it is older
	// than this (a replica died between claiming it and recording it); default 2 min.
	OrphanGrace time.Duration
}

// Defaults of Config.
const (
	defaultPendingTimeout  = 2 * time.Minute
	defaultNodeLostGrace   = 30 * time.Second
	defaultOrphanGrace     = 2 * time.Minute
	defaultCPURequest      = "100m"
	defaultMemoryRequestMB = 128
)

// DefaultEgressExcept are the address ranges sandboxes never reach: private,
// shared, loopback, link-local (cloud metadata) and multicast ranges, IPv4
// and IPv6, so a sandbox with internet access reaches public addresses only.
var DefaultEgressExcept = []string{
	"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "100.64.0.0/10", "127.0.0.0/8",
	"169.254.0.0/16", "224.0.0.0/4", "240.0.0.0/4",
	"::1/128", "fc00::/7", "fe80::/10", "ff00::/8",
}

func (c *Config) defaults() error {
	if c.Namespace == "" {
		return errors.New("kubernetes backend: a namespace is required")
	}
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if c.PendingTimeout <= 0 {
		c.PendingTimeout = defaultPendingTimeout
	}
	if len(c.DNS) == 0 {
		c.DNS = []string{"1.1.1.1", "8.8.8.8"}
	}
	if c.EgressExcept == nil {
		c.EgressExcept = DefaultEgressExcept
	}
	if len(c.ReplicaSelector) == 0 {
		c.ReplicaSelector = map[string]string{"app.kubernetes.io/name": "cubby"}
	}
	if c.CPURequest == "" {
		c.CPURequest = defaultCPURequest
	}
	if c.MemoryRequestMB <= 0 {
		c.MemoryRequestMB = defaultMemoryRequestMB
	}
	if c.NodeLostToleration <= 0 {
		c.NodeLostToleration = defaultNodeLostGrace
	}
	if c.OrphanGrace <= 0 {
		c.OrphanGrace = defaultOrphanGrace
	}
	return nil
}

// Backend runs sandboxes as Pods. Create it with New; it is safe for
// concurrent use and implements backend.Backend.
type Backend struct {
	cfg     Config
	client  kubernetes.Interface
	log     *slog.Logger
	factory informers.SharedInformerFactory
	pods    corelisters.PodNamespaceLister
	synced  cache.InformerSynced
	stop    chan struct{}
	stopped sync.Once

	mu      sync.Mutex
	subs    []func(backend.Event)
	changed chan struct{}         // closed and replaced on every Pod change (waiters)
	seen    map[string]podSummary // last state of each claimed Pod, for events
	tombs   map[string]tomb       // why recently gone sandboxes went
}

// New returns a backend on client for cfg, starts its Pod informer and waits
// (until ctx ends) for the first list. Errors: invalid cfg, ctx ending first.
func New(ctx context.Context, client kubernetes.Interface, cfg Config, log *slog.Logger) (*Backend, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	sel := labels.SelectorFromSet(labels.Set{LabelManagedBy: managedBy}).String()
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(cfg.Namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = sel }))
	inf := factory.Core().V1().Pods()
	b := &Backend{
		cfg: cfg, client: client, log: log, factory: factory, pods: inf.Lister().Pods(cfg.Namespace),
		synced: inf.Informer().HasSynced, stop: make(chan struct{}), changed: make(chan struct{}),
		seen: map[string]podSummary{}, tombs: map[string]tomb{},
	}
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { b.observe(obj, false) },
		UpdateFunc: func(_, obj any) { b.observe(obj, false) },
		DeleteFunc: func(obj any) { b.observe(obj, true) },
	}); err != nil {
		return nil, fmt.Errorf("watch sandbox pods: %w", err)
	}
	factory.Start(b.stop)
	if !cache.WaitForCacheSync(ctx.Done(), b.synced) {
		b.Close()
		return nil, fmt.Errorf("list sandbox pods in %s: %w", cfg.Namespace, errors.Join(ctx.Err(), backend.ErrUnavailable))
	}
	return b, nil
}

// Close stops the informer. Sandboxes keep running.
func (b *Backend) Close() error {
	b.stopped.Do(func() {
		close(b.stop)
		b.factory.Shutdown()
	})
	return nil
}

// Healthy checks that the Kubernetes API answers this replica's requests in
// its namespace (a one-item list of sandbox Pods). Errors wrap
// backend.ErrUnavailable.
func (b *Backend) Healthy(ctx context.Context) error {
	_, err := b.client.CoreV1().Pods(b.cfg.Namespace).List(ctx, metav1.ListOptions{
		LabelSelector: LabelManagedBy + "=" + managedBy, Limit: 1,
	})
	if err != nil {
		return fmt.Errorf("kubernetes API: %w: %w", backend.ErrUnavailable, err)
	}
	return nil
}

// CanPause reports false: Kubernetes has no memory pause (docs/kubernetes.md).
func (b *Backend) CanPause() bool { return false }

// Pause implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) Pause(context.Context, string, backend.PauseOptions) (backend.PauseMode, error) {
	return "", fmt.Errorf("pause on the kubernetes backend: a Pod cannot be paused and is never killed in its place: %w", backend.ErrNotSupported)
}

// Resume implements backend.Backend: backend.ErrNotSupported.
func (b *Backend) Resume(context.Context, string) (backend.Instance, error) {
	return backend.Instance{}, fmt.Errorf("resume on the kubernetes backend: %w", backend.ErrNotSupported)
}

var _ backend.Backend = (*Backend)(nil)
