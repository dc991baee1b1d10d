package cluster

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	authzv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cubby-dev/cubby/internal/testenv/testkube"
	"github.com/cubby-dev/cubby/internal/testenv/testserver"
)

// manifestsFile holds the plain manifests rendered from the chart with its
// default values for namespace "cubby" (`make manifests` rewrites it).
const manifestsFile = "deploy/manifests/cubby.yaml"

// TestChartManifestsUpToDate: the plain manifests are the chart's rendering.
func TestChartManifestsUpToDate(t *testing.T) {
	if _, err := os.Stat(filepath.Join(testkube.BinDir(), "helm")); err != nil {
		t.Skip("helm not built: run `make k8s-tools`")
	}
	root, err := testserver.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	want, err := testkube.Helm(chartDir(t), "cubby", "cubby")
	if err != nil {
		t.Fatal(err)
	}
	have, err := os.ReadFile(filepath.Join(root, manifestsFile))
	if err != nil || !bytes.Equal(have, want) {
		t.Fatalf("%s is not the chart's rendering (run `make manifests`): %v", manifestsFile, err)
	}
}

// TestChartServerSideDryRun: every object the chart renders passes the API
// server's validation and admission (a server-side dry run), and the
// replicas' service account may do what a replica does in its namespace and
// nothing else (the API server's own access reviews).
func TestChartServerSideDryRun(t *testing.T) {
	c := clusterOf(t, testkube.TierAPI)
	ns := c.Namespace(t)
	all, err := testkube.Helm(chartDir(t), "cubby", ns, "--set", "sandbox.pools.base=2", "--set", "apiKey.secretName=cubby-key",
		"--set", "sandbox.runtimeClasses.default=gvisor", "--set", "domain=sandboxes.example.com")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Apply(context.Background(), all, ns, true); err != nil {
		t.Fatalf("server-side dry run: %v", err)
	}
	kc := chartIdentity(t, c, ns)
	cfg, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	sa, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range []struct {
		ns, group, resource, sub, verb string
		allowed                        bool
	}{
		{ns, "", "pods", "", "create", true}, {ns, "", "pods", "", "watch", true}, {ns, "", "pods", "", "delete", true},
		{ns, "", "pods", "log", "get", true}, {ns, "coordination.k8s.io", "leases", "", "update", true},
		{ns, "networking.k8s.io", "networkpolicies", "", "create", true}, {ns, "networking.k8s.io", "networkpolicies", "", "delete", true},
		{ns, "", "events", "", "create", true},
		{ns, "", "secrets", "", "get", false}, {ns, "", "pods", "exec", "create", false}, {ns, "", "services", "", "create", false},
		{ns, "", "serviceaccounts", "token", "create", false}, {"default", "", "pods", "", "list", false},
		{"", "", "nodes", "", "list", false}, {ns, "rbac.authorization.k8s.io", "roles", "", "update", false},
	} {
		r, err := sa.AuthorizationV1().SelfSubjectAccessReviews().Create(context.Background(), &authzv1.SelfSubjectAccessReview{
			Spec: authzv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authzv1.ResourceAttributes{
				Namespace: a.ns, Group: a.group, Resource: a.resource, Subresource: a.sub, Verb: a.verb}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if r.Status.Allowed != a.allowed {
			t.Errorf("%s %s/%s in %q: allowed=%v, want %v", a.verb, a.resource, a.sub, a.ns, r.Status.Allowed, a.allowed)
		}
	}
}
