package testkube

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	authv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
)

// Apply creates every object of the YAML stream manifests in the API server
// (dryRun: validated and admitted by the server, then discarded: a
// server-side dry run). Objects without a namespace get ns when namespaced.
func (c *Cluster) Apply(ctx context.Context, manifests []byte, ns string, dryRun bool) error {
	dc, err := discovery.NewDiscoveryClientForConfig(c.Config)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	opts := metav1.CreateOptions{FieldManager: "kubetest"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("decode manifest: %w", err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return fmt.Errorf("%s: %w", gvk, err)
		}
		r := dyn.Resource(m.Resource)
		var ri dynamic.ResourceInterface = r
		if m.Scope.Name() == "namespace" {
			if obj.GetNamespace() == "" {
				obj.SetNamespace(ns)
			}
			ri = r.Namespace(obj.GetNamespace())
		}
		if _, err := ri.Create(ctx, &obj, opts); err != nil {
			return fmt.Errorf("%s %s: %w", gvk.Kind, obj.GetName(), err)
		}
	}
}

// ServiceAccountKubeconfig writes a kubeconfig that authenticates as service
// account sa of ns (a token from the TokenRequest API, valid for a day) and
// returns its path.
func (c *Cluster) ServiceAccountKubeconfig(ctx context.Context, ns, sa string) (string, error) {
	exp := int64((24 * time.Hour).Seconds())
	tr, err := c.Client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa,
		&authv1.TokenRequest{Spec: authv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token of %s/%s: %w", ns, sa, err)
	}
	path := filepath.Join(c.Dir, "sa-"+ns+"-"+sa+".kubeconfig")
	return path, WriteKubeconfig(path, c.Server, tr.Status.Token, ns)
}

// Helm renders the chart at chartDir (bin/k8s/helm template) as release
// name in ns, with more helm template flags in args (--set, --show-only),
// and returns the manifests.
func Helm(chartDir, name, ns string, args ...string) ([]byte, error) {
	argv := append([]string{"template", name, chartDir, "--namespace", ns}, args...)
	cmd := exec.Command(filepath.Join(BinDir(), "helm"), argv...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	home := filepath.Join(os.TempDir(), "cubby-helm-home")
	cmd.Env = append(os.Environ(), "HELM_CACHE_HOME="+home, "HELM_CONFIG_HOME="+home, "HELM_DATA_HOME="+home)
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("helm template: %w: %s", err, stderr.String())
	}
	return out, nil
}
