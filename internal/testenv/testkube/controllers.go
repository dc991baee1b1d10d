package testkube

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// startControllers starts kube-controller-manager and kube-scheduler on the
// administrator kubeconfig, with node-lifecycle timings short enough for
// tests (a silent node is not-ready after 20 s).
func (c *Cluster) startControllers() error {
	if _, err := c.run("kube-controller-manager", nil, filepath.Join(c.bin, "kube-controller-manager"),
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
		"--service-account-private-key-file="+filepath.Join(c.Dir, "sa.key"), "--use-service-account-credentials=false",
		"--controllers=*,-nodeipam,-route,-service,-cloud-node-lifecycle", "--node-monitor-grace-period=20s",
		"--node-monitor-period=2s", "--terminated-pod-gc-threshold=1000",
	); err != nil {
		return err
	}
	if _, err := c.run("kube-scheduler", nil, filepath.Join(c.bin, "kube-scheduler"),
		"--kubeconfig="+c.Kubeconfig, "--leader-elect=false", "--bind-address=127.0.0.1", "--secure-port=0",
	); err != nil {
		return err
	}
	return c.waitServiceAccount("default")
}

// waitServiceAccount waits until the controller manager made the default
// service account of ns.
func (c *Cluster) waitServiceAccount(ns string) error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for {
		if _, err := c.Client.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{}); err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("no default service account in %s: %w", ns, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Namespace creates a fresh namespace for t with its default service account
// (made by hand on TierAPI, which has no controller manager) and returns its name.
func (c *Cluster) Namespace(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	name := "t-" + strings.ToLower(randSuffix())
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	if c.Tier == TierAPI {
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}
		if _, err := c.Client.CoreV1().ServiceAccounts(name).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create service account: %v", err)
		}
	} else if err := c.waitServiceAccount(name); err != nil {
		t.Fatal(err)
	}
	return name
}

// kwokNode is the simulated node's name.
const kwokNode = "kwok-node-0"

// startKwok starts kwok with the stage files of its module (fast pod and
// node stages, node heartbeats through node Leases) and registers one simulated node with room
// for many sandboxes. Pod IPs come from a random 127.x.0.0/16.
func (c *Cluster) startKwok() error {
	stages, err := kwokStages(c.Dir)
	if err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	c.PodCIDR = fmt.Sprintf("127.%d.0.0/16", 100+int(randByte())%100)
	if _, err := c.run("kwok", nil, filepath.Join(c.bin, "kwok"), "--kubeconfig="+c.Kubeconfig, "-c", stages,
		"--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
		"--cidr="+c.PodCIDR, "--node-ip=127.0.0.1", fmt.Sprintf("--server-address=127.0.0.1:%d", port), "--node-lease-duration-seconds=40",
	); err != nil {
		return err
	}
	return c.AddKwokNode(kwokNode)
}

// AddKwokNode registers a simulated node (32 CPUs, 256 GiB, 1000 pods).
func (c *Cluster) AddKwokNode(name string) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{"kubernetes.io/hostname": name, "type": "kwok"}},
		Status: corev1.NodeStatus{Allocatable: capacity(), Capacity: capacity()},
	}
	_, err := c.Client.CoreV1().Nodes().Create(context.Background(), node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	return nil
}

func capacity() corev1.ResourceList {
	return corev1.ResourceList{
		corev1.ResourceCPU: mustQuantity("32"), corev1.ResourceMemory: mustQuantity("256Gi"),
		corev1.ResourcePods: mustQuantity("1000"), corev1.ResourceEphemeralStorage: mustQuantity("1Ti"),
	}
}

// kwokStages concatenates kwok's stage files (from its module, located with
// `go list -m`) into <dir>/kwok-stages.yaml and returns the path.
func kwokStages(dir string) (string, error) {
	root, err := repoTool("kwok")
	if err != nil {
		return "", err
	}
	cmd := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("locate the kwok module (go list in %s): %w", root, err)
	}
	mod := strings.TrimSpace(string(out))
	var files []string
	for _, sub := range []string{"node/fast", "node/heartbeat-with-lease", "pod/fast"} {
		m, _ := filepath.Glob(filepath.Join(mod, "kustomize", "stage", sub, "*.yaml"))
		files = append(files, m...)
	}
	var all []string
	for _, f := range files {
		if strings.HasSuffix(f, "kustomization.yaml") {
			continue
		}
		data, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		all = append(all, string(data))
	}
	path := filepath.Join(dir, "kwok-stages.yaml")
	return path, os.WriteFile(path, []byte(strings.Join(all, "\n---\n")), 0o644)
}
