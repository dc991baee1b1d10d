package testkube

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/cubby-dev/cubby/internal/testenv/testhost"
)

// pauseImage is the test node's Pod sandbox image, built by loadPause.
const pauseImage = "cubby.local/kubetest/pause:1"

// writeConfigs writes containerd's configuration (its own root, state and
// socket; the CNI bridge plugin with addresses from podNet; no AppArmor; OOM
// score adjustments clamped, since this machine lacks CAP_SYS_RESOURCE), the
// CNI network and the kubelet's configuration. Pods run with runcBinary.
func (n *node) writeConfigs() error {
	d := n.dir
	containerd := fmt.Sprintf(`version = 2
root = %[1]q
state = %[2]q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins."io.containerd.internal.v1.opt"]
  path = %[5]q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %[6]q
  restrict_oom_score_adj = true
  disable_apparmor = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = %[7]q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = %[8]q
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"), n.sock, n.sock+".ttrpc",
		filepath.Join(d, "containerd", "opt"), pauseImage, filepath.Join(d, "cni"), runcBinary())
	cni := fmt.Sprintf(`{"cniVersion": "0.4.0", "name": "cubby-kubetest", "plugins": [
  {"type": "bridge", "bridge": "cni0", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
`, filepath.Join(d, "cni-ipam"), n.podNet.String())
	files := map[string]string{
		"containerd.toml":          containerd,
		"cni/10-bridge.conflist":   cni,
		"kubelet.yaml":             n.kubeletConfig(),
		"resolv.conf":              "nameserver 127.0.0.53\n",
		"kubelet/pki/.placeholder": "",
	}
	for rel, body := range files {
		p := filepath.Join(d, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// kubeletConfig is the KubeletConfiguration of the test node: cgroup v1 with
// the cgroupfs driver below its own cgroup root, no swap check, anonymous
// access for the API server's log requests (the node is reachable only from
// this machine), no iptables chains, no image garbage collection, logs in the
// test directory and no pressure eviction: the node shares its disk and page
// cache with everything else the machine runs, and one dip while a multi-GB
// template image is imported would mark it DiskPressure or MemoryPressure
// (a NoSchedule taint held for evictionPressureTransitionPeriod) and leave
// every Pod of the next minutes unscheduled. "0%" disables a signal.
func (n *node) kubeletConfig() string {
	return fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
authentication: {anonymous: {enabled: true}, webhook: {enabled: false}}
authorization: {mode: AlwaysAllow}
address: %[1]s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
cgroupDriver: cgroupfs
cgroupRoot: /%[2]s
failCgroupV1: false
failSwapOn: false
containerRuntimeEndpoint: unix://%[3]s
podCIDR: %[4]s
resolvConf: %[5]s
podLogsDir: %[6]s
makeIPTablesUtilChains: false
protectKernelDefaults: false
serializeImagePulls: false
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard: {memory.available: "0%%", nodefs.available: "0%%", nodefs.inodesFree: "0%%", imagefs.available: "0%%", imagefs.inodesFree: "0%%", pid.available: "0%%"}
evictionPressureTransitionPeriod: 10s
`, n.nodeIP, n.cgroup, n.sock, n.podNet, filepath.Join(n.dir, "resolv.conf"), filepath.Join(n.dir, "pod-logs"))
}

// runcBinary is the runc the node's containerd runs Pods with: the pinned
// <repo>/bin/runc (`make runc`), as the single-host server prefers, else
// "runc" from PATH.
func runcBinary() string {
	if root, err := testhost.RepoRoot(); err == nil {
		if p := filepath.Join(root, "bin", "runc"); fileExists(p) {
			return p
		}
	}
	return "runc"
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// loadPause builds the pause program, wraps it in an image and imports it.
func (n *node) loadPause() error {
	bin, err := n.buildHelper("pause")
	if err != nil {
		return err
	}
	archive := filepath.Join(n.dir, "pause.tar")
	if err := singleFileImage(bin, "/pause", pauseImage, archive); err != nil {
		return err
	}
	return n.ctr("images", "import", archive)
}

// buildHelper builds the program ./internal/testenv/testkube/<name> (static) into the
// node's directory and returns its path.
func (n *node) buildHelper(name string) (string, error) {
	root, err := testhost.RepoRoot()
	if err != nil {
		return "", err
	}
	bin := filepath.Join(n.dir, name)
	cmd := exec.Command("go", "build", "-o", bin, "./internal/testenv/testkube/"+name)
	cmd.Dir, cmd.Env = root, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build %s: %w: %s", name, err, out)
	}
	return bin, nil
}

// singleFileImage writes a docker-archive of an image holding only file (at
// path in the image, its entrypoint) tagged ref.
func singleFileImage(file, path, ref, archive string) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.WriteHeader(&tar.Header{Name: path[1:], Mode: 0o755, Size: int64(len(data)), Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := tw.Write(data); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(buf.Bytes())), nil })
	if err != nil {
		return err
	}
	img, err := mutate.AppendLayers(empty.Image, layer)
	if err != nil {
		return err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture, cf.Config.Entrypoint = "linux", goruntime.GOARCH, []string{path}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		return err
	}
	tag, err := name.NewTag(ref)
	if err != nil {
		return err
	}
	return tarball.WriteToFile(archive, tag, img)
}
