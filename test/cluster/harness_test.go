// Package cluster tests `cubby serve --backend kubernetes`: real replicas
// (the cubby binary of CUBBY_BIN) sharing a real PostgreSQL and a Kubernetes
// cluster started by internal/testenv/testkube. The simulated tier (kwok nodes, agent
// stand-ins on the Pod IPs) exercises the control plane at scale; the node
// tier runs real sandbox Pods under a real kubelet for the official SDKs.
package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/cubby-dev/cubby/internal/testenv/testkube"
	"github.com/cubby-dev/cubby/internal/testenv/testpostgres"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// shared holds the clusters and PostgreSQL server of this package's tests,
// started on first use and stopped by TestMain.
var shared struct {
	mu       sync.Mutex
	clusters map[testkube.Tier]*testkube.Cluster
	pg       *testpostgres.Server
}

func TestMain(m *testing.M) {
	code := m.Run()
	shared.mu.Lock()
	for _, c := range shared.clusters {
		c.Stop()
		_ = os.RemoveAll(c.Dir)
	}
	if shared.pg != nil {
		shared.pg.Remove()
	}
	shared.mu.Unlock()
	os.Exit(code)
}

// skip skips t when tier, PostgreSQL or the cubby binary are not available.
func skip(t testing.TB, tier testkube.Tier) {
	t.Helper()
	for _, r := range []string{testkube.SkipReason(tier), testpostgres.SkipReason(), testserver.SkipReason()} {
		if r != "" {
			t.Skip(r)
		}
	}
}

// clusterOf returns the shared cluster of tier, starting it on first use.
func clusterOf(t testing.TB, tier testkube.Tier) *testkube.Cluster {
	t.Helper()
	skip(t, tier)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if c := shared.clusters[tier]; c != nil {
		return c
	}
	dir, err := os.MkdirTemp("", "cubby-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	c, err := testkube.Launch(tier, dir)
	if err != nil {
		t.Fatal(err)
	}
	if shared.clusters == nil {
		shared.clusters = map[testkube.Tier]*testkube.Cluster{}
	}
	shared.clusters[tier] = c
	return c
}

// database returns a fresh PostgreSQL database's DSN.
func database(t testing.TB) (*testpostgres.Server, string) {
	t.Helper()
	shared.mu.Lock()
	if shared.pg == nil {
		pg, err := testpostgres.Start("")
		if err != nil {
			shared.mu.Unlock()
			t.Fatal(err)
		}
		shared.pg = pg
	}
	pg := shared.pg
	shared.mu.Unlock()
	dsn, err := pg.CreateDB(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return pg, dsn
}

// fleet is a set of replicas of one deployment: one namespace, one database.
type fleet struct {
	t        testing.TB
	c        *testkube.Cluster
	ns, dsn  string
	key      string
	opts     testkube.ReplicaOptions
	replicas []*testkube.Replica
}

// newFleet starts n replicas on a fresh namespace and database of c with
// extra serve flags args; they stop when t ends (their logs are attached when
// it fails).
func newFleet(t testing.TB, c *testkube.Cluster, n int, images map[string]string, args ...string) *fleet {
	t.Helper()
	_, dsn := database(t)
	f := &fleet{t: t, c: c, ns: c.Namespace(t), dsn: dsn, key: "e2b_" + testserver.RandHex(20)}
	f.opts = testkube.ReplicaOptions{Namespace: f.ns, Store: dsn, Key: f.key, Images: images, Args: args,
		Kubeconfig: chartIdentity(t, c, f.ns)}
	t.Cleanup(func() {
		if t.Failed() {
			if report := c.NodeReport(); report != "" {
				t.Logf("node:\n%s", report)
			}
		}
		for _, r := range f.replicas {
			if t.Failed() {
				t.Logf("replica %s log:\n%s", r.Name, r.Log())
			}
			r.Kill9()
		}
	})
	for i := range n {
		f.add(fmt.Sprintf("replica-%d", i))
	}
	return f
}

// chartIdentity applies the Helm chart's service account and RBAC in ns and
// returns a kubeconfig of that service account: replicas then have exactly
// the rights the chart gives them.
func chartIdentity(t testing.TB, c *testkube.Cluster, ns string) string {
	t.Helper()
	rbac, err := testkube.Helm(chartDir(t), "cubby", ns, "--show-only", "templates/serviceaccount.yaml", "--show-only", "templates/rbac.yaml")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Apply(ctx, rbac, ns, false); err != nil {
		t.Fatal(err)
	}
	kc, err := c.ServiceAccountKubeconfig(ctx, ns, "cubby")
	if err != nil {
		t.Fatal(err)
	}
	return kc
}

// chartDir is deploy/helm/cubby.
func chartDir(t testing.TB) string {
	t.Helper()
	root, err := testserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "deploy", "helm", "cubby")
}

// add starts one more replica.
func (f *fleet) add(name string) *testkube.Replica {
	f.t.Helper()
	r, err := f.c.StartReplica(f.ns+"-"+name, f.opts)
	if err != nil {
		f.t.Fatal(err)
	}
	f.replicas = append(f.replicas, r)
	return r
}

// call sends an API request with the fleet's key to replica r and returns
// the status and decoded JSON body (into out when non-nil).
func (f *fleet) call(r *testkube.Replica, method, path string, body, out any) int {
	f.t.Helper()
	client := &http.Client{Timeout: 5 * time.Minute}
	resp, data, err := testserver.CallURL(context.Background(), client, f.key, method, r.URL(path), body)
	if err != nil {
		f.t.Fatalf("%s %s on %s: %v", method, path, r.Name, err)
	}
	if out != nil && len(data) > 0 {
		_ = json.Unmarshal(data, out)
	}
	return resp.StatusCode
}

// sandbox is the part of the create answer the tests read.
type sandbox struct {
	SandboxID string `json:"sandboxID"`
	Message   string `json:"message"`
}

// create creates a sandbox of template through r with body fields extra
// (timeout in seconds when > 0) and returns its ID and the status.
func (f *fleet) create(r *testkube.Replica, template string, timeout int) (string, int, string) {
	f.t.Helper()
	body := map[string]any{"templateID": template}
	if timeout > 0 {
		body["timeout"] = timeout
	}
	var sb sandbox
	status := f.call(r, http.MethodPost, "/v2/sandboxes", body, &sb)
	return sb.SandboxID, status, sb.Message
}

// eventually polls ok every 100 ms until it holds or d passes.
func eventually(t testing.TB, d time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", d, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
