// Package testkube starts real Kubernetes control planes for Cubby's cluster
// tests, in three tiers that each say what is real:
//
//   - TierAPI: etcd (Debian's) and a real kube-apiserver (built from
//     k8s.io/kubernetes in tools/k8s): validation, admission (RuntimeClass,
//     ServiceAccount), RBAC, optimistic concurrency, watches. Pods stay
//     Pending; nothing runs.
//   - TierSimulated: plus kube-scheduler, kube-controller-manager and kwok,
//     which simulates nodes: Pods are scheduled, marked running and given
//     loopback IPs without running anything (tests put stand-ins there).
//   - TierNode: plus a real node inside a network namespace the harness
//     creates: containerd (Debian's), the pinned bin/runc (else PATH's),
//     the CNI bridge plugin and a real kubelet; Pods run for real.
//
// Binaries come from CUBBY_K8S_BIN (default <repo>/bin/k8s, `make k8s-tools`);
// Start skips the test when they are missing or the process is not root.
// Every process is stopped by its PID when the cluster stops.
package testkube

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/cubby-dev/cubby/internal/testenv/testhost"
)

// Tier selects how much of a cluster Start runs.
type Tier int

// Tiers, cheapest first.
const (
	TierAPI Tier = iota + 1
	TierSimulated
	TierNode
)

// readyTimeout bounds the wait for each component to answer.
const readyTimeout = 3 * time.Minute

// Cluster is a running control plane (and node).
type Cluster struct {
	Dir        string // work directory: logs, certificates, data
	Server     string // https://host:port of the kube-apiserver
	Token      string // bearer token of an administrator (system:masters)
	Kubeconfig string // administrator kubeconfig file
	Client     kubernetes.Interface
	Config     *rest.Config
	Tier       Tier
	PodCIDR    string // the Pods' address range (TierSimulated, TierNode)

	bin     string
	host    string // address the API server binds and advertises
	apiArgs []string
	api     *proc
	mu      sync.Mutex
	procs   []*proc
	undo    []func()
	node    *node // TierNode
}

// BinDir returns the directory of the Kubernetes binaries: CUBBY_K8S_BIN, else
// <repo>/bin/k8s.
func BinDir() string {
	if d := os.Getenv("CUBBY_K8S_BIN"); d != "" {
		return d
	}
	root, err := testhost.RepoRoot()
	if err != nil {
		return "bin/k8s"
	}
	return filepath.Join(root, "bin", "k8s")
}

// SkipReason returns why tier cannot run here ("" when it can).
func SkipReason(tier Tier) string {
	if os.Geteuid() != 0 {
		return "the cluster tests need root"
	}
	need := []string{"etcd", "kube-apiserver"}
	if tier >= TierSimulated {
		need = append(need, "kube-scheduler", "kube-controller-manager")
	}
	if tier == TierSimulated {
		need = append(need, "kwok")
	}
	if tier == TierNode {
		need = append(need, "kubelet")
	}
	for _, b := range need {
		if _, err := os.Stat(filepath.Join(BinDir(), b)); err != nil {
			return fmt.Sprintf("%s not built: run `make k8s-tools` (or set CUBBY_K8S_BIN)", b)
		}
	}
	for _, b := range tierPrograms(tier) {
		if _, err := exec.LookPath(b); err != nil {
			return fmt.Sprintf("%s not installed: run scripts/install-deps.sh --test", b)
		}
	}
	return ""
}

// tierPrograms are the host programs a tier needs (Debian packages).
func tierPrograms(tier Tier) []string {
	if tier == TierNode {
		return []string{"containerd", "ctr", "nsenter", "unshare", "/usr/lib/cni/bridge"}
	}
	return nil
}

// Start starts a cluster of tier for t (skipping t when it cannot run here)
// and stops it when t ends; logs of every component are attached when t fails.
func Start(t testing.TB, tier Tier) *Cluster {
	t.Helper()
	if r := SkipReason(tier); r != "" {
		t.Skip(r)
	}
	c, err := Launch(tier, t.TempDir())
	if err != nil {
		t.Fatalf("testkube: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("cluster logs:\n%s", c.Logs(3000))
		}
		c.Stop()
	})
	return c
}

// Launch starts a cluster of tier in dir (outside a test: the caller checks
// SkipReason and calls Stop). Errors carry the failing component's log tail.
func Launch(tier Tier, dir string) (c *Cluster, err error) {
	c = &Cluster{Dir: dir, bin: BinDir(), host: "127.0.0.1", Tier: tier, Token: testhost.RandHex(16)}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w\n%s", err, c.Logs(2000))
			c.Stop()
		}
	}()
	if tier == TierNode {
		if c.node, err = newNode(c); err != nil {
			return c, err
		}
		c.host = c.node.hostIP
	}
	if err := c.startAPI(); err != nil {
		return c, err
	}
	if tier >= TierSimulated {
		if err := c.startControllers(); err != nil {
			return c, err
		}
	}
	switch tier {
	case TierSimulated:
		err = c.startKwok()
	case TierNode:
		err = c.node.start()
	}
	return c, err
}

// Stop stops every process (last started first) and undoes host changes.
func (c *Cluster) Stop() {
	c.mu.Lock()
	procs, undo := c.procs, c.undo
	c.procs, c.undo = nil, nil
	c.mu.Unlock()
	for i := len(procs) - 1; i >= 0; i-- {
		procs[i].stop()
	}
	for i := len(undo) - 1; i >= 0; i-- {
		undo[i]()
	}
}

// Logs returns the tail (n bytes) of every component's log.
func (c *Cluster) Logs(n int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var b strings.Builder
	for _, p := range c.procs {
		fmt.Fprintf(&b, "--- %s ---\n%s\n", p.name, p.tail(n))
	}
	return b.String()
}

// run starts a component and remembers it for Stop.
func (c *Cluster) run(name string, prefix []string, bin string, args ...string) (*proc, error) {
	p, err := start(c.Dir, name, prefix, nil, bin, args...)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return p, nil
}

// onStop registers an undo step for Stop.
func (c *Cluster) onStop(f func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.undo = append(c.undo, f)
}

// startAPI starts etcd and the kube-apiserver and waits for /readyz.
func (c *Cluster) startAPI() error {
	etcdPort, peerPort, apiPort, err := freePorts3()
	if err != nil {
		return err
	}
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", etcdPort)
	peerURL := fmt.Sprintf("http://127.0.0.1:%d", peerPort)
	if _, err := c.run("etcd", nil, filepath.Join(c.bin, "etcd"), "--data-dir", filepath.Join(c.Dir, "etcd"), "--name", "default",
		"--listen-client-urls", etcdURL, "--advertise-client-urls", etcdURL, "--listen-peer-urls", peerURL,
		"--initial-advertise-peer-urls", peerURL, "--initial-cluster", "default="+peerURL); err != nil {
		return err
	}
	if err := c.writeCredentials(); err != nil {
		return err
	}
	c.Server = fmt.Sprintf("https://%s:%d", c.host, apiPort)
	c.apiArgs = c.apiserverArgs(etcdURL, apiPort)
	if err := c.StartAPIServer(); err != nil {
		return err
	}
	return c.connect()
}

// StartAPIServer (re)starts the kube-apiserver on its port and data and
// waits until it is ready.
func (c *Cluster) StartAPIServer() error {
	p, err := c.run("kube-apiserver", nil, filepath.Join(c.bin, "kube-apiserver"), c.apiArgs...)
	if err != nil {
		return err
	}
	c.api = p
	return c.waitHTTP(p, c.Server+"/readyz")
}

// StopAPIServer kills the kube-apiserver (SIGKILL, as a lost control plane).
func (c *Cluster) StopAPIServer() { c.api.kill() }

func (c *Cluster) apiserverArgs(etcdURL string, port int) []string {
	d := c.Dir
	return []string{
		"--etcd-servers=" + etcdURL, "--bind-address=" + c.host, fmt.Sprintf("--secure-port=%d", port),
		"--advertise-address=" + c.host, "--endpoint-reconciler-type=none", "--cert-dir=" + filepath.Join(d, "certs"),
		"--token-auth-file=" + filepath.Join(d, "tokens.csv"), "--authorization-mode=RBAC",
		"--service-account-issuer=https://kubernetes.default.svc", "--service-account-key-file=" + filepath.Join(d, "sa.pub"),
		"--service-account-signing-key-file=" + filepath.Join(d, "sa.key"), "--service-cluster-ip-range=10.0.0.0/24",
		"--allow-privileged=true", "--enable-priority-and-fairness=false",
	}
}

// writeCredentials writes the token file (the administrator) and the
// service-account signing key pair.
func (c *Cluster) writeCredentials() error {
	tokens := fmt.Sprintf("%s,admin,admin-uid,system:masters\n", c.Token)
	if err := os.WriteFile(filepath.Join(c.Dir, "tokens.csv"), []byte(tokens), 0o600); err != nil {
		return err
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(c.Dir, "sa.key"), pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY",
		Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(c.Dir, "sa.pub"), pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

// connect writes the administrator kubeconfig and builds the client.
func (c *Cluster) connect() error {
	c.Kubeconfig = filepath.Join(c.Dir, "admin.kubeconfig")
	if err := WriteKubeconfig(c.Kubeconfig, c.Server, c.Token, ""); err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.Kubeconfig)
	if err != nil {
		return err
	}
	cfg.QPS, cfg.Burst = 200, 400
	c.Config = cfg
	c.Client, err = kubernetes.NewForConfig(cfg)
	return err
}

// WriteKubeconfig writes a kubeconfig for server authenticating with token
// (TLS not verified: the test API server's certificate is self-signed),
// whose context's namespace is ns ("" = default).
func WriteKubeconfig(path, server, token, ns string) error {
	if ns == "" {
		ns = "default"
	}
	y := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: test
  cluster: {server: %q, insecure-skip-tls-verify: true}
users:
- name: test
  user: {token: %q}
contexts:
- name: test
  context: {cluster: test, user: test, namespace: %q}
current-context: test
`, server, token, ns)
	return os.WriteFile(path, []byte(y), 0o600)
}

// waitHTTP polls url (with the administrator token) until it answers 200, p
// exits, or readyTimeout passes.
func (c *Cluster) waitHTTP(p *proc, url string) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	var last error
	for ctx.Err() == nil {
		if p.exited() {
			return fmt.Errorf("%s exited: %s", p.name, p.tail(3000))
		}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		req.Header.Set("Authorization", "Bearer "+c.Token)
		resp, err := client.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("%s answered %d", url, resp.StatusCode)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not ready: %w", p.name, errors.Join(last, ctx.Err()))
}

// freePorts3 returns three distinct free ports on 127.0.0.1.
func freePorts3() (a, b, c int, err error) {
	seen := map[int]bool{}
	var ports []int
	for len(ports) < 3 {
		p, err := testhost.FreePort()
		if err != nil {
			return 0, 0, 0, err
		}
		if !seen[p] {
			seen[p] = true
			ports = append(ports, p)
		}
	}
	return ports[0], ports[1], ports[2], nil
}

func freePort() (int, error) { return testhost.FreePort() }

func randByte() byte {
	b := make([]byte, 1)
	_, _ = rand.Read(b)
	return b[0]
}

// randSuffix returns 8 random hex digits.
func randSuffix() string { return testhost.RandHex(4) }

func mustQuantity(s string) resource.Quantity { return resource.MustParse(s) }

// repoTool returns <repo>/tools/<name>, a tools module.
func repoTool(name string) (string, error) {
	root, err := testhost.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "tools", name), nil
}
