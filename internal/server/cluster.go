package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/backend/kube"
	"github.com/cubby-dev/cubby/internal/controlplane"
	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/internal/store/postgres"
	"github.com/cubby-dev/cubby/internal/telemetry"
	"github.com/cubby-dev/cubby/internal/template"
)

// KubeConfig configures `cubby serve --backend kubernetes` (README's
// "Kubernetes" section; docs/kubernetes.md).
type KubeConfig struct {
	// Kubeconfig is a kubeconfig file; "" = the in-cluster config of a Pod,
	// else $KUBECONFIG or ~/.kube/config.
	Kubeconfig string
	// Namespace of the sandbox Pods; "" = the replica Pod's own (in a
	// cluster), else "default".
	Namespace string
	// Images maps a template name to the OCI image its sandboxes run
	// (`cubby template export` builds one). Required, with the default template.
	Images map[string]string
	// RuntimeClasses maps a runtime name ("" = default, "runc", "runsc") to a
	// RuntimeClass; none = the cluster's default handler.
	RuntimeClasses map[string]string
	// HostUsers runs sandbox Pods in the nodes' user namespace (hostUsers:
	// true, `--user-namespaces=false`); by default each Pod gets its own.
	HostUsers bool
	// ImagePullPolicy of sandbox containers (Always, IfNotPresent, Never);
	// default DefaultImagePullPolicy.
	ImagePullPolicy string
	// PendingTimeout, DNS, EgressExcept, ReplicaSelector, CPURequest,
	// MemoryRequestMB: see kube.Config.
	PendingTimeout  time.Duration
	DNS             []string
	EgressExcept    []string
	ReplicaSelector map[string]string
	CPURequest      string
	MemoryRequestMB int
	// Identity names this replica (Lease holder, Pod annotations); default
	// $POD_NAME, else the host name.
	Identity string
	// Election tunes leader election on the Lease kube.LeaseName.
	Election kube.Election
	// QPS and Burst bound this replica's requests to the Kubernetes API.
	QPS   float32
	Burst int
}

// Defaults of the cluster mode.
const (
	defaultNamespace = "default"
	defaultKubeQPS   = 50
	defaultKubeBurst = 100
	// inClusterNamespace holds the namespace of a Pod's service account.
	inClusterNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"
	// healthInterval is how often a replica checks PostgreSQL and the Kubernetes API.
	healthInterval = 2 * time.Second
)

// clusterDefaults validates and completes a kubernetes-mode config.
func (c *Config) clusterDefaults() error {
	if !strings.HasPrefix(c.Store, "postgres://") && !strings.HasPrefix(c.Store, "postgresql://") {
		return errors.New("--backend kubernetes needs --store postgres://…: replicas share their records in PostgreSQL")
	}
	if _, ok := c.Kube.Images[c.DefaultTemplate]; !ok {
		return fmt.Errorf("--template-image: the default template %q has no image", c.DefaultTemplate)
	}
	k := &c.Kube
	if k.Namespace == "" {
		k.Namespace = defaultNamespace
		if ns, err := os.ReadFile(inClusterNamespace); err == nil {
			k.Namespace = strings.TrimSpace(string(ns))
		}
	}
	if k.Identity == "" {
		k.Identity = os.Getenv("POD_NAME")
	}
	if k.Identity == "" {
		h, err := os.Hostname()
		if err != nil {
			return fmt.Errorf("replica identity: %w", err)
		}
		k.Identity = h
	}
	if k.QPS <= 0 {
		k.QPS, k.Burst = defaultKubeQPS, defaultKubeBurst
	}
	return nil
}

// restConfig loads the client configuration: the kubeconfig when given, else
// the in-cluster one, else the default kubeconfig loading rules.
func (k KubeConfig) restConfig() (*rest.Config, error) {
	var rc *rest.Config
	var err error
	if k.Kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", k.Kubeconfig)
	} else if rc, err = rest.InClusterConfig(); err != nil {
		rules := clientcmd.NewDefaultClientConfigLoadingRules()
		rc, err = clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("kubernetes client config: %w", err)
	}
	rc.QPS, rc.Burst = k.QPS, k.Burst
	rc.UserAgent = "cubby/" + k.Identity
	return rc, nil
}

// startCluster assembles one replica: PostgreSQL records, the kubernetes
// backend, its warm pool and NetworkPolicies, the control plane, the health
// check and the leader election that gives one replica the TTLs and refills.
func startCluster(ctx context.Context, cfg Config, log *slog.Logger) (*app, error) {
	a := &app{metrics: telemetry.New(), log: log}
	ok := false
	defer func() {
		if !ok {
			a.close()
		}
	}()
	st, err := postgres.Open(ctx, cfg.Store)
	if err != nil {
		return nil, fmt.Errorf("open store: %w", err)
	}
	a.closers = append(a.closers, func() { _ = st.Close() })
	kb, err := newKubeBackend(ctx, cfg, log)
	if err != nil {
		return nil, err
	}
	a.closers = append(a.closers, func() { _ = kb.Close() })
	resolver := newImageTemplates(cfg.Kube.Images)
	a.health = newHealthCheck(st.Ping, kb.Healthy)
	var cp *controlplane.Service
	deps := controlplane.Deps{Store: st, Backend: kb, Templates: resolver, Health: a.health.err}
	if len(cfg.Pool) > 0 {
		deps.Pool = kb.NewPool(kube.PoolConfig{Targets: cfg.Pool, Metrics: a.metrics,
			Resolve: func(ctx context.Context, t string) (backend.CreateRequest, error) { return cp.PoolRequest(ctx, t) },
			NewID:   sandboxid.New})
	}
	if cp, err = a.startControl(ctx, cfg, controlDeps{deps: deps}); err != nil {
		return nil, err
	}
	bg, cancel := context.WithCancel(context.WithoutCancel(ctx))
	var wg sync.WaitGroup
	wg.Go(func() { a.health.run(bg) })
	wg.Go(func() { kb.Elect(bg, cfg.Kube.Election, cp.Lead) })
	a.closers = append(a.closers, func() { cancel(); wg.Wait() })
	warnNoKeys(ctx, cfg, st, log)
	ok = true
	return a, nil
}

// newKubeBackend connects to the cluster and starts the backend.
func newKubeBackend(ctx context.Context, cfg Config, log *slog.Logger) (*kube.Backend, error) {
	rc, err := cfg.Kube.restConfig()
	if err != nil {
		return nil, err
	}
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	k := cfg.Kube
	images := make(map[string]string, len(k.Images))
	for name, image := range k.Images {
		images[template.IDFor(name)] = image
	}
	kb, err := kube.New(ctx, client, kube.Config{
		Namespace: k.Namespace, Images: images, RuntimeClasses: k.RuntimeClasses, UserNamespaces: !k.HostUsers,
		ImagePullPolicy: corev1.PullPolicy(k.ImagePullPolicy), PendingTimeout: k.PendingTimeout, DNS: k.DNS,
		EgressExcept: k.EgressExcept, ReplicaSelector: k.ReplicaSelector, CPURequest: k.CPURequest,
		MemoryRequestMB: k.MemoryRequestMB, Identity: k.Identity,
	}, log.With("component", "kubernetes"))
	if err != nil {
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	if err := kb.EnsurePolicies(ctx); err != nil {
		_ = kb.Close()
		return nil, fmt.Errorf("kubernetes backend: %w", err)
	}
	return kb, nil
}

// warnNoKeys logs how to create the first key when no key can authenticate:
// replicas never create one themselves (they would race).
func warnNoKeys(ctx context.Context, cfg Config, st *postgres.Store, log *slog.Logger) {
	if cfg.EnvAPIKey != "" {
		return
	}
	if keys, err := st.ActiveAPIKeys(ctx); err == nil && len(keys) == 0 {
		log.Warn("no API key can authenticate: set CUBBY_API_KEY or run `cubby keys create --store <the same postgres URL>`")
	}
}

// imageTemplates resolves the templates of the cluster mode: each configured
// name (its ID is template.IDFor(name); a built-in's aliases name it too)
// runs its configured image. Every replica is given the same images (the
// chart's values), so the configuration is the one record of them.
type imageTemplates struct {
	byRef map[string]controlplane.TemplateRef // by name and by ID
}

// newImageTemplates returns the resolver of the configured templates.
func newImageTemplates(images map[string]string) *imageTemplates {
	t := &imageTemplates{byRef: map[string]controlplane.TemplateRef{}}
	for name := range images {
		ref := controlplane.TemplateRef{ID: template.IDFor(name), Alias: name}
		t.byRef[name] = ref
		if def, ok := template.Builtin(name); ok {
			for _, a := range def.Aliases { // e.g. code-interpreter-v1, the official SDKs' default
				t.byRef[a] = ref
			}
		}
		t.byRef[ref.ID] = ref
	}
	return t
}

// Resolve implements controlplane.TemplateResolver.
func (t *imageTemplates) Resolve(_ context.Context, ref string) (controlplane.TemplateRef, error) {
	r, ok := t.byRef[ref]
	if !ok {
		return controlplane.TemplateRef{}, fmt.Errorf("template %q: %w", ref, controlplane.ErrTemplateNotFound)
	}
	return r, nil
}

// healthCheck keeps the last verdict on the store and the backend.
type healthCheck struct {
	checks []func(context.Context) error
	mu     sync.Mutex
	last   error
}

func newHealthCheck(checks ...func(context.Context) error) *healthCheck {
	h := &healthCheck{checks: checks}
	h.check(context.Background())
	return h
}

// err returns the last failure, nil when healthy (and on a nil healthCheck).
func (h *healthCheck) err() error {
	if h == nil {
		return nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.last
}

// run checks every healthInterval until ctx ends.
func (h *healthCheck) run(ctx context.Context) {
	t := time.NewTicker(healthInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			h.check(ctx)
		}
	}
}

func (h *healthCheck) check(ctx context.Context) {
	var errs []error
	for _, c := range h.checks {
		cctx, cancel := context.WithTimeout(ctx, healthInterval)
		errs = append(errs, c(cctx))
		cancel()
	}
	h.mu.Lock()
	h.last = errors.Join(errs...)
	h.mu.Unlock()
}
