package cluster

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/backend/kube"
	"github.com/cubby-dev/cubby/internal/store"
	"github.com/cubby-dev/cubby/internal/store/postgres"
	"github.com/cubby-dev/cubby/internal/testenv/testkube"
)

// The tests of this file run on TierSimulated: a real API server, scheduler
// and controller manager, kwok's simulated nodes, and stand-ins on the Pod
// IPs in place of sandboxes. What they check is the control plane's: Pods
// created, scheduled, claimed, reaped and reported, by several replicas.

// simImages are the templates of the simulated tier (kwok pulls nothing).
var simImages = map[string]string{"base": "cubby.local/templates/base:simulated"}

// unlimited lifts the admission limits that would refuse a burst of creates.
var unlimited = []string{"--create-rate", "0", "--team-max-sandboxes", "0", "--memory-mb", "256", "--max-memory-mb", "10000000"}

// TestHundredSandboxes: 100 sandboxes created through two replicas at once
// are all scheduled and running, every replica lists and kills them.
func TestHundredSandboxes(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 2, simImages, unlimited...)
	c.ServeStandIns(t, f.ns)
	const n = 100
	ids := make([]string, n)
	began := time.Now()
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			id, status, msg := f.create(f.replicas[i%2], "base", 600)
			if status != http.StatusCreated {
				t.Errorf("create %d: %d %s", i, status, msg)
			}
			ids[i] = id
		})
	}
	wg.Wait()
	t.Logf("%d sandboxes created through 2 replicas in %s", n, time.Since(began).Round(time.Millisecond))
	if t.Failed() {
		t.FailNow()
	}
	pods, err := c.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelState + "=" + kube.StateClaimed})
	if err != nil || len(pods.Items) != n {
		t.Fatalf("%d sandbox pods, %v", len(pods.Items), err)
	}
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase != corev1.PodRunning {
			t.Fatalf("pod %s on %q is %s", p.Name, p.Spec.NodeName, p.Status.Phase)
		}
	}
	for _, r := range f.replicas {
		var list []sandbox
		if status := f.call(r, http.MethodGet, "/v2/sandboxes?limit=100", nil, &list); status != http.StatusOK || len(list) != n {
			t.Fatalf("%s lists %d sandboxes (%d)", r.Name, len(list), status)
		}
	}
	killAll(t, f, ids)
}

// killAll kills ids through alternating replicas and checks they are gone
// everywhere.
func killAll(t *testing.T, f *fleet, ids []string) {
	t.Helper()
	began := time.Now()
	for i, id := range ids {
		if status := f.call(f.replicas[(i+1)%len(f.replicas)], http.MethodDelete, "/sandboxes/"+id, nil, nil); status != http.StatusNoContent {
			t.Fatalf("kill %s: %d", id, status)
		}
	}
	t.Logf("%d sandboxes killed in %s", len(ids), time.Since(began).Round(time.Millisecond))
	for _, r := range f.replicas {
		if status := f.call(r, http.MethodGet, "/sandboxes/"+ids[0], nil, nil); status != http.StatusNotFound {
			t.Fatalf("%s: killed sandbox answers %d", r.Name, status)
		}
	}
	eventually(t, time.Minute, "sandbox pods deleted", func() bool {
		pods, err := f.c.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelState + "=" + kube.StateClaimed})
		return err == nil && len(pods.Items) == 0
	})
}

// record reads sandbox id's record from the fleet's database.
func (f *fleet) record(id string) store.Sandbox {
	f.t.Helper()
	st, err := postgres.Open(context.Background(), f.dsn)
	if err != nil {
		f.t.Fatal(err)
	}
	defer st.Close()
	rec, err := st.GetSandbox(context.Background(), id)
	if err != nil {
		f.t.Fatal(err)
	}
	return rec
}

// leader returns the replica holding the Lease.
func (f *fleet) leader() *testkube.Replica {
	f.t.Helper()
	var holder string
	eventually(f.t, time.Minute, "a leader", func() bool {
		l, err := f.c.Client.CoordinationV1().Leases(f.ns).Get(context.Background(), kube.LeaseName, metav1.GetOptions{})
		if err == nil && l.Spec.HolderIdentity != nil {
			holder = *l.Spec.HolderIdentity
		}
		return holder != ""
	})
	for _, r := range f.replicas {
		if r.Name == holder {
			return r
		}
	}
	f.t.Fatalf("lease held by unknown %q", holder)
	return nil
}

// warm counts the fleet's warm Pods.
func (f *fleet) warm() int {
	pods, err := f.c.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{LabelSelector: kube.LabelState + "=" + kube.StateWarm})
	if err != nil {
		return -1
	}
	n := 0
	for _, p := range pods.Items {
		if p.DeletionTimestamp == nil {
			n++
		}
	}
	return n
}

// TestReaperAndRefillSurviveLeaderLoss: the leader keeps a warm pool of 3;
// creates through the other replica claim warm Pods; the leader is killed
// (SIGKILL) before their deadline; the replica left takes the Lease, reaps
// the sandboxes at their deadline and refills the pool.
func TestReaperAndRefillSurviveLeaderLoss(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 2, simImages, append([]string{"--pool", "base=3"}, unlimited...)...)
	c.ServeStandIns(t, f.ns)
	eventually(t, 2*time.Minute, "3 warm pods", func() bool { return f.warm() == 3 })
	leader := f.leader()
	other := f.replicas[0]
	if other == leader {
		other = f.replicas[1]
	}
	var ids []string
	for range 2 {
		id, status, msg := f.create(other, "base", 6)
		if status != http.StatusCreated {
			t.Fatalf("create: %d %s", status, msg)
		}
		ids = append(ids, id)
	}
	if pod, _ := c.Client.CoreV1().Pods(f.ns).Get(context.Background(), kube.PodPrefix+ids[0], metav1.GetOptions{}); pod == nil || pod.Labels[kube.LabelState] != kube.StateClaimed {
		t.Fatalf("create did not claim a warm pod")
	}
	leader.Kill9()
	eventually(t, time.Minute, "the other replica leads", func() bool { return f.leader() == other })
	for _, id := range ids {
		eventually(t, time.Minute, "sandbox "+id+" reaped", func() bool {
			r := f.record(id)
			return r.State == store.StateKilled && r.KillReason == "timeout"
		})
	}
	eventually(t, 2*time.Minute, "the pool refilled to 3", func() bool { return f.warm() == 3 })
}

// TestRacingKills: two replicas killing one sandbox at once: one answers 204,
// the other 404, as a second kill on one server does.
func TestRacingKills(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 2, simImages, unlimited...)
	c.ServeStandIns(t, f.ns)
	for range 5 {
		id, status, msg := f.create(f.replicas[0], "base", 600)
		if status != http.StatusCreated {
			t.Fatalf("create: %d %s", status, msg)
		}
		// the second replica serves it too (adopted from the store on first use)
		if status := f.call(f.replicas[1], http.MethodGet, "/sandboxes/"+id, nil, nil); status != http.StatusOK {
			t.Fatalf("get through the other replica: %d", status)
		}
		codes := make([]int, 2)
		var wg sync.WaitGroup
		for i, r := range f.replicas {
			wg.Go(func() { codes[i] = f.call(r, http.MethodDelete, "/sandboxes/"+id, nil, nil) })
		}
		wg.Wait()
		if codes[0]+codes[1] != http.StatusNoContent+http.StatusNotFound {
			t.Fatalf("racing kills answered %v", codes)
		}
	}
}

// TestEvictionAndNodeLossReported: a sandbox whose Pod the cluster evicts,
// and one whose node disappears, are recorded killed with the cluster's
// reason and answer 404 on every replica.
func TestEvictionAndNodeLossReported(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 2, simImages, unlimited...)
	c.ServeStandIns(t, f.ns)
	id, status, msg := f.create(f.replicas[0], "base", 600)
	if status != http.StatusCreated {
		t.Fatalf("create: %d %s", status, msg)
	}
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Name: kube.PodPrefix + id, Namespace: f.ns}}
	if err := c.Client.PolicyV1().Evictions(f.ns).Evict(context.Background(), ev); err != nil {
		t.Fatal(err)
	}
	f.expectGone(id, "EvictionByEvictionAPI")
	lost := "kwok-lost-" + strings.ToLower(f.ns)
	if err := c.AddKwokNode(lost); err != nil {
		t.Fatal(err)
	}
	id = f.createOn(lost)
	if err := c.Client.CoreV1().Nodes().Delete(context.Background(), lost, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.expectGone(id, "DeletionByPodGC")
}

// createOn creates a sandbox whose Pod lands on node (the others cordoned meanwhile).
func (f *fleet) createOn(node string) string {
	f.t.Helper()
	nodes, err := f.c.Client.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	cordon := func(on bool) {
		for _, n := range nodes.Items {
			if n.Name == node {
				continue
			}
			patch := []byte(`{"spec":{"unschedulable":` + map[bool]string{true: "true", false: "false"}[on] + `}}`)
			if _, err := f.c.Client.CoreV1().Nodes().Patch(context.Background(), n.Name, "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
				f.t.Fatal(err)
			}
		}
	}
	cordon(true)
	defer cordon(false)
	id, status, msg := f.create(f.replicas[0], "base", 600)
	if status != http.StatusCreated {
		f.t.Fatalf("create on %s: %d %s", node, status, msg)
	}
	return id
}

// expectGone waits until sandbox id is recorded killed with a reason
// containing why, and checks every replica answers 404.
func (f *fleet) expectGone(id, why string) {
	f.t.Helper()
	eventually(f.t, 3*time.Minute, "sandbox "+id+" recorded gone ("+why+")", func() bool {
		r := f.record(id)
		return r.State == store.StateKilled && strings.Contains(r.KillReason, why)
	})
	f.t.Logf("recorded: %s", f.record(id).KillReason)
	for _, r := range f.replicas {
		eventually(f.t, 30*time.Second, r.Name+" answers 404", func() bool {
			return f.call(r, http.MethodGet, "/sandboxes/"+id, nil, nil) == http.StatusNotFound
		})
	}
}

// TestStoreLost: replicas whose PostgreSQL goes away answer /health and
// creates with 503, write nothing, and recover when it returns.
func TestStoreLost(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 2, simImages, unlimited...)
	c.ServeStandIns(t, f.ns)
	pg, _ := database(t)
	pg.Stop()
	restarted := false
	defer func() {
		if !restarted {
			_ = pg.Restart()
		}
	}()
	for _, r := range f.replicas {
		if err := r.WaitHealth(http.StatusServiceUnavailable); err != nil {
			t.Fatal(err)
		}
	}
	if _, status, msg := f.create(f.replicas[0], "base", 600); status != http.StatusServiceUnavailable {
		t.Fatalf("create without the store: %d %s", status, msg)
	}
	if pods, _ := c.Client.CoreV1().Pods(f.ns).List(context.Background(), metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Fatalf("a create without the store left %d pods", len(pods.Items))
	}
	if err := pg.Restart(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	for _, r := range f.replicas {
		if err := r.WaitHealth(http.StatusOK); err != nil {
			t.Fatal(err)
		}
	}
	if _, status, msg := f.create(f.replicas[1], "base", 600); status != http.StatusCreated {
		t.Fatalf("create after the store returned: %d %s", status, msg)
	}
}

// TestAPIServerLost: replicas that lose the Kubernetes API answer /health
// and creates with 503 and recover when it returns (run last: it stops the
// shared API server for a while).
func TestAPIServerLost(t *testing.T) {
	c := clusterOf(t, testkube.TierSimulated)
	f := newFleet(t, c, 2, simImages, unlimited...)
	c.ServeStandIns(t, f.ns)
	c.StopAPIServer()
	restarted := false
	defer func() {
		if !restarted {
			_ = c.StartAPIServer()
		}
	}()
	for _, r := range f.replicas {
		if err := r.WaitHealth(http.StatusServiceUnavailable); err != nil {
			t.Fatal(err)
		}
	}
	if _, status, msg := f.create(f.replicas[0], "base", 600); status != http.StatusServiceUnavailable {
		t.Fatalf("create without the API: %d %s", status, msg)
	}
	if err := c.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	restarted = true
	for _, r := range f.replicas {
		if err := r.WaitHealth(http.StatusOK); err != nil {
			t.Fatal(err)
		}
	}
	id, status, msg := f.create(f.replicas[1], "base", 600)
	if status != http.StatusCreated {
		t.Fatalf("create after the API returned: %d %s", status, msg)
	}
	if status := f.call(f.replicas[0], http.MethodDelete, "/sandboxes/"+id, nil, nil); status != http.StatusNoContent {
		t.Fatalf("kill: %d", status)
	}
}
