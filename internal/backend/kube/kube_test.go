package kube

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	nodev1 "k8s.io/api/node/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/pool"
	"github.com/cubby-dev/cubby/internal/testenv/testkube"
)

// The tests of this file run against a real kube-apiserver and etcd
// (testkube.TierAPI): real validation, admission, RBAC and optimistic
// concurrency. Nothing runs Pods at this tier, so tests that need a running
// Pod write its status themselves (as a kubelet would) and answer its agent's
// port with a stand-in on the Pod's loopback IP.

// api is the package's shared API server; nil when it cannot start here.
var api struct {
	once sync.Once
	c    *testkube.Cluster
	err  error
}

func cluster(t *testing.T) *testkube.Cluster {
	t.Helper()
	if r := testkube.SkipReason(testkube.TierAPI); r != "" {
		t.Skip(r)
	}
	api.once.Do(func() { api.c, api.err = testkube.Launch(testkube.TierAPI, tempDir()) })
	if api.err != nil {
		t.Fatal(api.err)
	}
	return api.c
}

// newBackend returns a backend on a fresh namespace of c, closed when t ends.
func newBackend(t *testing.T, c *testkube.Cluster, ns string, edit func(*Config)) *Backend {
	t.Helper()
	cfg := Config{Namespace: ns, Images: map[string]string{"tpl": "cubby.local/templates/base:1"}, Identity: "r-" + t.Name()}
	if edit != nil {
		edit(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	b, err := New(ctx, c.Client, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

func request(id string) backend.CreateRequest {
	return backend.CreateRequest{
		SandboxID: id, TemplateID: "tpl", CPUCount: 2, MemoryMB: 512, DiskSizeMB: 1024, Team: "acme",
		Metadata: map[string]string{"owner": "me"}, Deadline: time.Now().Add(time.Minute), NoInternet: true,
		Boot: agentapi.BootOptions{DefaultContexts: []string{"python"}},
	}
}

// TestCreatePendingPastDeadline: the Pod the API server admits carries the
// sandbox's spec; one that is still pending at PendingTimeout (nothing
// schedules it here) fails the create and is deleted.
func TestCreatePendingPastDeadline(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	b := newBackend(t, c, ns, func(cfg *Config) {
		cfg.PendingTimeout, cfg.UserNamespaces = 3*time.Second, true
		cfg.RuntimeClasses = map[string]string{}
	})
	errc := make(chan error, 1)
	go func() {
		_, err := b.Create(context.Background(), request("aaaaaaaaaaaaaaaaaaa1"))
		errc <- err
	}()
	pod := waitPod(t, c, ns, podName("aaaaaaaaaaaaaaaaaaa1"))
	checkSpec(t, pod)
	err := <-errc
	if err == nil || !strings.Contains(err.Error(), "not running after 3s") {
		t.Fatalf("create of a pod that never runs: %v", err)
	}
	waitGone(t, c, ns, pod.Name)
}

// checkSpec checks the sandbox Pod as the API server stored it.
func checkSpec(t *testing.T, pod *corev1.Pod) {
	t.Helper()
	s, ctr := pod.Spec, pod.Spec.Containers[0]
	for k, want := range map[string]string{LabelID: "aaaaaaaaaaaaaaaaaaa1", LabelTemplate: "tpl", LabelTeam: "acme",
		LabelState: StateClaimed, LabelInternet: "false", LabelSandbox: "true", LabelManagedBy: "cubby"} {
		if pod.Labels[k] != want {
			t.Errorf("label %s = %q, want %q", k, pod.Labels[k], want)
		}
	}
	if pod.Annotations[AnnMetadata] != `{"owner":"me"}` || pod.Annotations[AnnDeadline] == "" || !linked(pod) {
		t.Errorf("annotations = %v", pod.Annotations)
	}
	switch {
	case s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken:
		t.Error("service account token mounted")
	case s.HostUsers == nil || *s.HostUsers:
		t.Error("hostUsers is not false")
	case s.EnableServiceLinks == nil || *s.EnableServiceLinks:
		t.Error("service links enabled")
	case s.DNSPolicy != corev1.DNSNone || s.RestartPolicy != corev1.RestartPolicyNever:
		t.Errorf("dns policy %s, restart policy %s", s.DNSPolicy, s.RestartPolicy)
	case len(s.Volumes) != 0 || len(ctr.VolumeMounts) != 0:
		t.Errorf("volumes %v mounts %v", s.Volumes, ctr.VolumeMounts)
	case ctr.Command[0] != agentapi.AgentPath || ctr.Command[2] != "--default-contexts=python":
		t.Errorf("command %v", ctr.Command)
	case ctr.Resources.Limits.Cpu().Value() != 2 || ctr.Resources.Limits.Memory().Value() != 512<<20 ||
		ctr.Resources.Limits.StorageEphemeral().Value() != 1024<<20:
		t.Errorf("limits %v", ctr.Resources.Limits)
	case ctr.ReadinessProbe == nil || ctr.ReadinessProbe.HTTPGet.Path != "/health" || ctr.ReadinessProbe.HTTPGet.Port.IntValue() != agentapi.EnvdPort:
		t.Errorf("readiness probe %+v", ctr.ReadinessProbe)
	case s.SecurityContext.SeccompProfile == nil || s.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault:
		t.Error("no RuntimeDefault seccomp profile")
	}
}

// TestUnknownRuntimeClass: the RuntimeClass admission plugin refuses a Pod
// naming a class the cluster does not have; the create fails at once with
// backend.ErrInvalid (a 400), leaving nothing. Once the class exists the Pod
// is admitted with it.
func TestUnknownRuntimeClass(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	class := "gvisor-" + strings.ToLower(ns)
	b := newBackend(t, c, ns, func(cfg *Config) {
		cfg.RuntimeClasses, cfg.PendingTimeout = map[string]string{"": class}, 2*time.Second
	})
	began := time.Now()
	_, err := b.Create(context.Background(), request("bbbbbbbbbbbbbbbbbbb1"))
	if !errors.Is(err, backend.ErrInvalid) || !strings.Contains(err.Error(), fmt.Sprintf("RuntimeClass %q not found", class)) {
		t.Fatalf("create with an unknown RuntimeClass: %v", err)
	}
	if d := time.Since(began); d > 2*time.Second {
		t.Errorf("refusal took %s (it must not wait for the pending deadline)", d)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), podName("bbbbbbbbbbbbbbbbbbb1"), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("pod after a refused create: %v", err)
	}
	rc := &nodev1.RuntimeClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Handler: "runsc"}
	if _, err := c.Client.NodeV1().RuntimeClasses().Create(context.Background(), rc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.Client.NodeV1().RuntimeClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	go func() { _, _ = b.Create(context.Background(), request("bbbbbbbbbbbbbbbbbbb2")) }()
	pod := waitPod(t, c, ns, podName("bbbbbbbbbbbbbbbbbbb2"))
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != class {
		t.Fatalf("runtimeClassName = %v", pod.Spec.RuntimeClassName)
	}
}

// waitPod waits until Pod name exists and returns it.
func waitPod(t *testing.T, c *testkube.Cluster, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	eventually(t, 30*time.Second, "pod "+name+" created", func() bool {
		p, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		pod = p
		return err == nil
	})
	return pod
}

// waitGone waits until Pod name no longer exists.
func waitGone(t *testing.T, c *testkube.Cluster, ns, name string) {
	t.Helper()
	eventually(t, 30*time.Second, "pod "+name+" deleted", func() bool {
		_, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
}

func eventually(t *testing.T, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// standIn answers an agent's port on addr (a loopback Pod IP) as a booted,
// unsecured agent does, and counts the inits it got.
type standIn struct {
	mu    sync.Mutex
	inits int
}

func (s *standIn) serve(t *testing.T, addr netip.Addr) {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	mux.HandleFunc("POST /init", func(w http.ResponseWriter, _ *http.Request) {
		s.mu.Lock()
		s.inits++
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	})
	serveAgent(t, addr, mux)
}

// serveAgent serves h on the agent's port of addr until t ends.
func serveAgent(t *testing.T, addr netip.Addr, h http.Handler) {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(addr, agentapi.EnvdPort).String())
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
}

// markRunning writes pod's status as a kubelet would: running, ready, at ip.
func markRunning(t *testing.T, c *testkube.Cluster, ns, name string, ip netip.Addr) {
	t.Helper()
	ctx := context.Background()
	pod, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	pod.Status.Phase, pod.Status.PodIP, pod.Status.StartTime = corev1.PodRunning, ip.String(), &now
	pod.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: now}}
	if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func tempDir() string {
	d, err := os.MkdirTemp("", "cubby-kube-test-")
	if err != nil {
		panic(err)
	}
	return d
}

func TestMain(m *testing.M) {
	code := m.Run()
	if api.c != nil {
		api.c.Stop()
		_ = os.RemoveAll(api.c.Dir)
	}
	os.Exit(code)
}

// warmPods creates n warm Pods of request("") in ns, marks them running at
// 127.<a>.<b>.<i+1> with a stand-in agent each, and returns the stand-in.
func warmPods(t *testing.T, c *testkube.Cluster, b *Backend, n int) *standIn {
	t.Helper()
	s := &standIn{}
	base := netip.MustParseAddr(fmt.Sprintf("127.%d.%d.0", 100+time.Now().Nanosecond()%100, time.Now().Nanosecond()%250))
	for i := range n {
		req := request(fmt.Sprintf("warm%016d", i))
		pod, err := b.podFor(req, StateWarm)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Client.CoreV1().Pods(b.cfg.Namespace).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		ip := base
		for range i + 1 {
			ip = ip.Next()
		}
		s.serve(t, ip)
		markRunning(t, c, b.cfg.Namespace, pod.Name, ip)
	}
	return s
}

// TestClaimRace: replicas (each its own backend and informer) racing to claim
// warm Pods: the resourceVersion precondition lets exactly one claim each Pod;
// losers move on to the next Pod or miss. The API server's records agree.
func TestClaimRace(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	const pods, replicas = 5, 8
	var bs []*Backend
	for i := range replicas {
		bs = append(bs, newBackend(t, c, ns, func(cfg *Config) { cfg.Identity = fmt.Sprintf("replica-%d", i) }))
	}
	s := warmPods(t, c, bs[0], pods)
	for _, b := range bs {
		eventually(t, 30*time.Second, "warm pods in every cache", func() bool { return len(b.NewPool(PoolConfig{}).candidates(poolKeyOf(b))) == pods })
	}
	got := make([]string, replicas)
	var wg sync.WaitGroup
	for i, b := range bs {
		wg.Go(func() {
			in, ok := b.NewPool(PoolConfig{}).Claim(context.Background(), request("unused0000000000000"+fmt.Sprint(i)))
			if ok {
				got[i] = in.SandboxID
			}
		})
	}
	wg.Wait()
	won := map[string]int{}
	for _, id := range got {
		if id != "" {
			won[id]++
		}
	}
	if len(won) != pods {
		t.Fatalf("claims %v: %d pods claimed, want %d", got, len(won), pods)
	}
	for id, n := range won {
		if n != 1 {
			t.Errorf("pod of %s claimed %d times", id, n)
		}
		pod, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), podName(id), metav1.GetOptions{})
		if err != nil || pod.Labels[LabelState] != StateClaimed || pod.Labels[LabelTeam] != "acme" {
			t.Errorf("claimed pod %s: %v %v", id, err, pod.Labels)
		}
	}
	if s.inits != pods {
		t.Errorf("%d inits for %d claims", s.inits, pods)
	}
}

func poolKeyOf(b *Backend) string {
	req := request("")
	return poolKey(req, b.cfg.Images[req.TemplateID], b.runtimeClass(req.Runtime))
}

// TestStaleUpdateConflicts: the precondition itself: an update carrying a
// resourceVersion another writer superseded is refused with a conflict.
func TestStaleUpdateConflicts(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	b := newBackend(t, c, ns, nil)
	warmPods(t, c, b, 1)
	pods := c.Client.CoreV1().Pods(ns)
	stale, err := pods.Get(context.Background(), podName(fmt.Sprintf("warm%016d", 0)), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := stale.DeepCopy()
	first.Labels[LabelState] = StateClaimed
	if _, err := pods.Update(context.Background(), first, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Labels[LabelState] = StateClaimed
	if _, err := pods.Update(context.Background(), stale, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
		t.Fatalf("stale update: %v, want a conflict", err)
	}
}

// TestLeaderElection: of replicas campaigning on the Lease, one leads at a
// time; when the leader stops (its lease released) another takes over.
func TestLeaderElection(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	var mu sync.Mutex
	leading, most := map[string]bool{}, 0
	el := Election{LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 300 * time.Millisecond}
	cancels := map[string]context.CancelFunc{}
	var wg sync.WaitGroup
	for _, id := range []string{"a", "b", "c"} {
		b := newBackend(t, c, ns, func(cfg *Config) { cfg.Identity = id })
		ctx, cancel := context.WithCancel(context.Background())
		cancels[id] = cancel
		wg.Go(func() {
			b.Elect(ctx, el, func(lctx context.Context) {
				mu.Lock()
				leading[id] = true
				most = max(most, len(leading))
				mu.Unlock()
				<-lctx.Done()
				mu.Lock()
				delete(leading, id)
				mu.Unlock()
			})
		})
	}
	t.Cleanup(func() {
		for _, c := range cancels {
			c()
		}
		wg.Wait()
	})
	leader := func() string {
		mu.Lock()
		defer mu.Unlock()
		for id := range leading {
			return id
		}
		return ""
	}
	eventually(t, 30*time.Second, "a leader", func() bool { return leader() != "" })
	first := leader()
	cancels[first]()
	eventually(t, 30*time.Second, "a new leader", func() bool { l := leader(); return l != "" && l != first })
	mu.Lock()
	defer mu.Unlock()
	if most != 1 {
		t.Fatalf("%d replicas led at once", most)
	}
}

// TestNetworkPolicies: the API server accepts the policies, EnsurePolicies is
// idempotent and restores a policy someone changed.
func TestNetworkPolicies(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	b := newBackend(t, c, ns, nil)
	ctx := context.Background()
	for range 2 {
		if err := b.EnsurePolicies(ctx); err != nil {
			t.Fatal(err)
		}
	}
	api := c.Client.NetworkingV1().NetworkPolicies(ns)
	iso, err := api.Get(ctx, PolicyIsolation, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(iso.Spec.PolicyTypes) != 2 || len(iso.Spec.Egress) != 0 || len(iso.Spec.Ingress) != 1 ||
		iso.Spec.Ingress[0].From[0].PodSelector.MatchLabels["app.kubernetes.io/name"] != "cubby" {
		t.Fatalf("isolation policy %+v", iso.Spec)
	}
	iso.Spec.Ingress = nil
	if _, err := api.Update(ctx, iso, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := b.EnsurePolicies(ctx); err != nil {
		t.Fatal(err)
	}
	net, err := api.Get(ctx, PolicyInternet, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if iso, _ = api.Get(ctx, PolicyIsolation, metav1.GetOptions{}); len(iso.Spec.Ingress) != 1 {
		t.Fatal("a changed policy was not restored")
	}
	except := net.Spec.Egress[0].To[0].IPBlock.Except
	if net.Spec.PodSelector.MatchLabels[LabelInternet] != "true" || !contains(except, "169.254.0.0/16") || !contains(except, "10.0.0.0/8") {
		t.Fatalf("internet policy %+v", net.Spec)
	}
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// TestEvents: a claimed Pod coming up, its deadline changing and its
// eviction reach subscribers; Lookup then reports the sandbox gone with the
// cluster's reason, and the failed Pod is deleted.
func TestEvents(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	b := newBackend(t, c, ns, nil)
	evs := make(chan backend.Event, 16)
	b.Subscribe(func(ev backend.Event) { evs <- ev })
	id := "eeeeeeeeeeeeeeeeeee1"
	pod, err := b.podFor(request(id), StateClaimed)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	markRunning(t, c, ns, pod.Name, netip.MustParseAddr("127.88.0.9"))
	if ev := next(t, evs); ev.Kind != backend.EventUp || ev.Instance.Addr.String() != "127.88.0.9" {
		t.Fatalf("first event %+v", ev)
	}
	deadline := time.Now().Add(time.Hour).Truncate(time.Millisecond).UTC()
	if err := b.SetDeadline(context.Background(), id, deadline); err != nil {
		t.Fatal(err)
	}
	if ev := next(t, evs); ev.Kind != backend.EventDeadline || !ev.Deadline.Equal(deadline) {
		t.Fatalf("deadline event %+v", ev)
	}
	evict(t, c, ns, pod.Name)
	ev := next(t, evs)
	if ev.Kind != backend.EventGone || !strings.Contains(ev.Reason, "Evicted") {
		t.Fatalf("gone event %+v", ev)
	}
	var gone *backend.GoneError
	if _, err := b.Lookup(context.Background(), id); !errors.As(err, &gone) || !strings.Contains(gone.Reason, "low on resource") {
		t.Fatalf("lookup after eviction: %v", err)
	}
	waitGone(t, c, ns, pod.Name)
}

// evict fails a Pod the way a kubelet's eviction manager does.
func evict(t *testing.T, c *testkube.Cluster, ns, name string) {
	t.Helper()
	pod, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod.Status.Phase, pod.Status.Reason = corev1.PodFailed, "Evicted"
	pod.Status.Message = "The node was low on resource: memory."
	if _, err := c.Client.CoreV1().Pods(ns).UpdateStatus(context.Background(), pod, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func next(t *testing.T, evs <-chan backend.Event) backend.Event {
	t.Helper()
	select {
	case ev := <-evs:
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event")
		return backend.Event{}
	}
}

// TestPoolTrimsBeyondTarget: a pool holding more warm Pods than its target
// (a refill that ran before its cache showed its boots, or a leader replaced
// mid-boot) deletes the extras on its next round; a Pod
// claimed after the round's snapshot is never among them (the delete's
// resourceVersion precondition fails).
func TestPoolTrimsBeyondTarget(t *testing.T) {
	c := cluster(t)
	ns := c.Namespace(t)
	b := newBackend(t, c, ns, nil)
	warmPods(t, c, b, 4)
	p := b.NewPool(PoolConfig{Targets: []pool.Target{{Template: "tpl", Size: 2}},
		Resolve: func(context.Context, string) (backend.CreateRequest, error) { return request(""), nil },
		NewID:   func() string { return "never" }})
	eventually(t, 30*time.Second, "4 warm pods cached", func() bool { return len(p.candidates(poolKeyOf(b))) == 4 })
	pods := p.members()
	claimed := pods[0].DeepCopy()
	claimed.Labels[LabelState] = StateClaimed
	if _, err := c.Client.CoreV1().Pods(ns).Update(context.Background(), claimed, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := p.trim(context.Background(), pods[:2], 2); n != 1 {
		t.Fatalf("trim deleted %d pods, want 1 (the one claimed meanwhile is kept)", n)
	}
	if got, err := c.Client.CoreV1().Pods(ns).Get(context.Background(), claimed.Name, metav1.GetOptions{}); err != nil || got.Labels[LabelState] != StateClaimed {
		t.Fatalf("the pod claimed meanwhile: %v, %v", got, err)
	}
	eventually(t, 30*time.Second, "2 warm pods cached", func() bool { return len(p.candidates(poolKeyOf(b))) == 2 })
	p.cfg.Targets[0].Size = 1
	p.refill(context.Background())
	eventually(t, 30*time.Second, "1 warm pod left", func() bool {
		list, _ := c.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{LabelSelector: LabelState + "=" + StateWarm})
		live := 0
		for _, pod := range list.Items {
			if pod.DeletionTimestamp == nil {
				live++
			}
		}
		return live == 1
	})
}
