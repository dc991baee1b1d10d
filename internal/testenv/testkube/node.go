package testkube

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/cubby-dev/cubby/internal/testenv/testhost"
	"github.com/cubby-dev/cubby/internal/testenv/testkube/mountns"
)

// node is the real node of TierNode: containerd and a kubelet inside a
// network namespace joined to the host by a veth pair. The host side holds
// the API server's address (linkNet .1); the Pods' range (podNet) is routed
// to the namespace's side (.2), so processes on the host (replicas, tests)
// reach Pod IPs. Nothing leaves for the internet: the namespace does not NAT.
type node struct {
	c        *Cluster
	name     string // node name
	netns    string // network namespace name (ip netns)
	hostIP   string // host end of the veth pair: the API server's address
	nodeIP   string // namespace end: the node's address
	podNet   netip.Prefix
	hostLink string
	cgroup   string // cgroup v1 root of the kubelet's Pods (below every hierarchy)
	dir      string
	sock     string // containerd's socket
	kubelet  *proc
}

// sysctlsKubeletWants are the kernel settings the kubelet insists on: it
// writes them when they differ, which would change the whole machine. It
// runs in its own mount namespace where these files are bind-mounted copies
// holding the values it wants, so the host's stay as they are.
var sysctlsKubeletWants = map[string]string{
	"vm/overcommit_memory": "1", "vm/panic_on_oom": "0", "kernel/panic": "10", "kernel/panic_on_oops": "1",
	"kernel/keys/root_maxkeys": "1000000", "kernel/keys/root_maxbytes": "25000000",
}

// newNode prepares the namespace, the veth pair and the route; Launch then
// binds the API server to hostIP and calls start.
func newNode(c *Cluster) (*node, error) {
	link, err := testhost.FreeSubnet()
	if err != nil {
		return nil, err
	}
	pods, err := testhost.FreeSubnet()
	if err != nil {
		return nil, err
	}
	lp, pp := netip.MustParsePrefix(link), netip.MustParsePrefix(pods)
	suffix := randSuffix()[:6]
	n := &node{
		c: c, name: "cubby-node-" + suffix, netns: "cbk" + suffix, hostLink: "cbkh" + suffix,
		hostIP: lp.Addr().Next().String(), nodeIP: lp.Addr().Next().Next().String(), podNet: pp,
		cgroup: "cubby-kubetest-" + suffix, dir: filepath.Join(c.Dir, "node"),
	}
	n.sock = filepath.Join(n.dir, "containerd", "containerd.sock")
	c.PodCIDR = pods
	if err := os.MkdirAll(filepath.Join(n.dir, "containerd"), 0o755); err != nil {
		return nil, err
	}
	return n, n.network()
}

// network creates the namespace, the veth pair and the route to the Pods.
func (n *node) network() error {
	peer := "cbkn" + strings.TrimPrefix(n.netns, "cbk")
	steps := [][]string{
		{"ip", "netns", "add", n.netns},
		{"ip", "link", "add", n.hostLink, "type", "veth", "peer", "name", peer, "netns", n.netns},
		{"ip", "addr", "add", n.hostIP + "/24", "dev", n.hostLink},
		{"ip", "link", "set", n.hostLink, "up"},
		{"ip", "-n", n.netns, "addr", "add", n.nodeIP + "/24", "dev", peer},
		{"ip", "-n", n.netns, "link", "set", peer, "up"},
		{"ip", "-n", n.netns, "link", "set", "lo", "up"},
		{"ip", "route", "add", n.podNet.String(), "via", n.nodeIP, "dev", n.hostLink},
		append(n.inNetns(), "sysctl", "-qw", "net.ipv4.ip_forward=1"),
	}
	n.c.onStop(func() { _ = exec.Command("ip", "netns", "del", n.netns).Run() })
	n.c.onStop(func() { _ = exec.Command("ip", "link", "del", n.hostLink).Run() })
	for _, s := range steps {
		if out, err := exec.Command(s[0], s[1:]...).CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(s, " "), err, out)
		}
	}
	return nil
}

// inNetns is the command prefix that runs a program in the node's network
// namespace only (ip netns exec would also remount /sys and hide the cgroup
// hierarchies the kubelet needs).
func (n *node) inNetns() []string {
	return []string{"nsenter", "--net=/run/netns/" + n.netns}
}

// start runs containerd and the kubelet, loads the pause image and waits
// for the node to be Ready.
func (n *node) start() error {
	if err := n.writeConfigs(); err != nil {
		return err
	}
	if err := n.makeCgroups(); err != nil {
		return err
	}
	n.c.onStop(n.cleanup) // runs before the cgroups are removed
	p, err := n.c.run("containerd", n.inNetns(), "containerd", "--config", filepath.Join(n.dir, "containerd.toml"))
	if err != nil {
		return err
	}
	if err := waitFile(p, n.sock); err != nil {
		return err
	}
	if err := n.loadPause(); err != nil {
		return err
	}
	prefix, err := n.kubeletPrefix()
	if err != nil {
		return err
	}
	if n.kubelet, err = n.c.run("kubelet", prefix, filepath.Join(n.c.bin, "kubelet"), n.kubeletArgs()...); err != nil {
		return err
	}
	return n.waitReady()
}

// kubeletNeeds are the paths whose mounts the kubelet's mount namespace keeps
// besides the cluster's (a separate /usr or /var, a bind-mounted resolv.conf).
var kubeletNeeds = []string{"/usr", "/lib", "/lib64", "/bin", "/sbin", "/etc/resolv.conf", "/etc/hosts",
	"/etc/hostname", "/var/log", "/opt/cni/bin", "/usr/lib/cni", "/etc/cni"}

// kubeletPrefix runs the kubelet in a mount namespace of its own (a slave
// of the host's) emptied of the host's mounts it does not need (dropmounts,
// package mountns: other tests' sandbox disks must not stay pinned there),
// with sysctlsKubeletWants bind-mounted, inside the node's network namespace.
func (n *node) kubeletPrefix() ([]string, error) {
	drop, err := n.buildHelper("dropmounts")
	if err != nil {
		return nil, err
	}
	argv := []string{"unshare", "--mount", "--propagation", "slave", drop,
		"-tree", n.c.Dir, "-tree", n.c.bin, "-tree", "/run/netns/" + n.netns}
	for _, p := range kubeletNeeds {
		argv = append(argv, "-path", p)
	}
	var script strings.Builder
	for key, val := range sysctlsKubeletWants {
		f := filepath.Join(n.dir, "sysctl-"+strings.ReplaceAll(key, "/", "-"))
		fmt.Fprintf(&script, "echo %s > %s && mount --bind %s /proc/sys/%s && ", val, f, f, key)
	}
	script.WriteString(`exec "$@"`)
	argv = append(argv, "--", "sh", "-c", script.String(), "kubelet")
	return append(argv, n.inNetns()...), nil
}

// KubeletMounts returns the mount points of the node's kubelet (its own
// mount namespace), for tests checking what it holds; nil without a node.
func (c *Cluster) KubeletMounts() ([]string, error) {
	if c.node == nil || c.node.kubelet == nil {
		return nil, nil
	}
	return mountns.Points(fmt.Sprintf("/proc/%d/mountinfo", c.node.kubelet.cmd.Process.Pid))
}

func (n *node) kubeletArgs() []string {
	return []string{"--config=" + filepath.Join(n.dir, "kubelet.yaml"), "--kubeconfig=" + n.c.Kubeconfig,
		"--hostname-override=" + n.name, "--node-ip=" + n.nodeIP, "--root-dir=" + filepath.Join(n.dir, "kubelet"),
		"--cert-dir=" + filepath.Join(n.dir, "kubelet", "pki"), "--v=1"}
}

// makeCgroups creates the kubelet's cgroup root in every hierarchy and
// registers its removal (deepest first) for Stop.
func (n *node) makeCgroups() error {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*")
	var made []string
	for _, d := range dirs {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			continue
		}
		p := filepath.Join(d, n.cgroup)
		if err := os.Mkdir(p, 0o755); err != nil && !os.IsExist(err) {
			return fmt.Errorf("cgroup %s: %w", p, err)
		}
		made = append(made, p)
	}
	n.c.onStop(func() {
		for _, p := range made {
			removeCgroup(p)
		}
	})
	return nil
}

// removeCgroup removes a cgroup directory tree, deepest first.
func removeCgroup(p string) {
	entries, _ := os.ReadDir(p)
	for _, e := range entries {
		if e.IsDir() {
			removeCgroup(filepath.Join(p, e.Name()))
		}
	}
	_ = os.Remove(p)
}

// waitReady waits until the node reports Ready.
func (n *node) waitReady() error {
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	for ctx.Err() == nil {
		if node, err := n.c.Client.CoreV1().Nodes().Get(ctx, n.name, metav1.GetOptions{}); err == nil {
			for _, cd := range node.Status.Conditions {
				if cd.Type == corev1.NodeReady && cd.Status == corev1.ConditionTrue {
					return nil
				}
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("node %s not ready", n.name)
}

// waitFile waits until path exists or p exits.
func waitFile(p *proc, path string) error {
	deadline := time.Now().Add(readyTimeout)
	for time.Now().Before(deadline) {
		if _, err := os.Stat(path); err == nil {
			return nil
		}
		if p.exited() {
			return fmt.Errorf("%s exited: %s", p.name, p.tail(3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s: no %s", p.name, path)
}

// ImportImage loads a docker-archive tarball into the node's containerd (its
// Kubernetes namespace), as a registry-less cluster gets images.
func (c *Cluster) ImportImage(tarball string) error {
	if c.node == nil {
		return fmt.Errorf("import image: not a TierNode cluster")
	}
	return c.node.ctr("images", "import", tarball)
}

// ctr runs containerd's client against the node's containerd.
func (n *node) ctr(args ...string) error {
	argv := append([]string{"--address", n.sock, "-n", "k8s.io"}, args...)
	if out, err := exec.Command("ctr", argv...).CombinedOutput(); err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// NodeNetns returns the path of the node's network namespace (TierNode).
func (c *Cluster) NodeNetns() string { return "/run/netns/" + c.node.netns }

// cleanup ends what the kubelet and containerd leave running when they stop:
// every process of the node's Pods (found in its cgroup tree) and the
// containerd shims serving its socket, then detaches the mounts below the
// node's directory (container root filesystems, Pod network namespaces).
func (n *node) cleanup() {
	for range 3 {
		killed := killCgroup(filepath.Join("/sys/fs/cgroup/pids", n.cgroup)) + killShims(n.sock)
		if killed == 0 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	testhost.ReleaseMounts(n.dir)
}

// killCgroup SIGKILLs every process in the cgroup tree at dir and returns how many.
func killCgroup(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
			return nil
		}
		data, _ := os.ReadFile(p)
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
		return nil
	})
	return n
}

// killShims SIGKILLs the containerd shims whose command line names sock.
func killShims(sock string) int {
	n := 0
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte("containerd-shim")) || !bytes.Contains(data, []byte(sock)) {
			continue
		}
		if pid, err := strconv.Atoi(filepath.Base(filepath.Dir(p))); err == nil && syscall.Kill(pid, syscall.SIGKILL) == nil {
			n++
		}
	}
	return n
}

// NodeReport describes the node of TierNode for a failing test: its
// conditions, taints, the free space of the filesystem holding its state
// (bytes) and the tail of the kubelet's log. It is "" on other tiers.
func (c *Cluster) NodeReport() string {
	if c.node == nil {
		return ""
	}
	var b strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	node, err := c.Client.CoreV1().Nodes().Get(ctx, c.node.name, metav1.GetOptions{})
	if err != nil {
		fmt.Fprintf(&b, "node %s: %v\n", c.node.name, err)
	} else {
		for _, cd := range node.Status.Conditions {
			fmt.Fprintf(&b, "condition %s=%s since %s: %s %s\n", cd.Type, cd.Status,
				cd.LastTransitionTime.Format(time.RFC3339), cd.Reason, cd.Message)
		}
		for _, tn := range node.Spec.Taints {
			fmt.Fprintf(&b, "taint %s\n", tn.ToString())
		}
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(c.node.dir, &st); err == nil {
		fmt.Fprintf(&b, "free bytes below %s: %d of %d\n", c.node.dir, st.Bavail*uint64(st.Bsize), st.Blocks*uint64(st.Bsize))
	}
	fmt.Fprintf(&b, "kubelet log tail:\n%s", c.node.kubelet.tail(8192))
	return b.String()
}
