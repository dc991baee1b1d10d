package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/server"
)

// storeEnv names the variable `serve` and `keys` read the store URL from
// when --store is not given (the Helm chart sets it from a Secret).
const storeEnv = "CUBBY_STORE"

// kubeFlags are the repeatable NAME=VALUE flags of the cluster mode and
// --user-namespaces, parsed into server.KubeConfig by apply.
type kubeFlags struct {
	images, runtimeClasses, replicaSelector []string
	userNamespaces                          bool
}

// addClusterFlags declares `serve`'s flags of --backend kubernetes.
func addClusterFlags(cmd *cobra.Command, cfg *server.Config, kf *kubeFlags, d server.Config) {
	f := cmd.Flags()
	k := &cfg.Kube
	f.StringVar(&cfg.Backend, "backend", d.Backend, "what runs sandboxes: local (this host) or kubernetes (a Pod per sandbox; run several replicas)")
	f.StringVar(&cfg.Store, "store", "", "record store: empty = SQLite in --data-dir; postgres://… = PostgreSQL shared by replicas (required by --backend kubernetes; default $"+storeEnv+")")
	f.StringVar(&k.Kubeconfig, "kubeconfig", "", "kubeconfig file (kubernetes backend; default: in-cluster config, else $KUBECONFIG)")
	f.StringVar(&k.Namespace, "namespace", "", "namespace of the sandbox Pods (default: the replica's own, else default)")
	f.StringArrayVar(&kf.images, "template-image", nil, "NAME=IMAGE: the OCI image sandboxes of template NAME run (cubby template export builds one; repeatable)")
	f.StringArrayVar(&kf.runtimeClasses, "runtime-class", nil, "RUNTIME=CLASS: the RuntimeClass of sandboxes of runtime default, runc or runsc (repeatable)")
	f.BoolVar(&kf.userNamespaces, "user-namespaces", !d.Kube.HostUsers, "run sandbox Pods in user namespaces (hostUsers: false; the nodes' runtime must support it)")
	f.StringVar(&k.ImagePullPolicy, "image-pull-policy", d.Kube.ImagePullPolicy, "pull policy of sandbox images: Always, IfNotPresent or Never")
	f.DurationVar(&k.PendingTimeout, "pending-timeout", 0, "a sandbox Pod not running by then is deleted and its create fails (default 2m)")
	f.StringSliceVar(&k.DNS, "sandbox-dns", nil, "nameservers of sandbox Pods, which do not see the cluster's DNS (default 1.1.1.1,8.8.8.8)")
	f.StringSliceVar(&k.EgressExcept, "egress-except", nil, "CIDRs sandboxes with internet access still cannot reach (default: private, shared, loopback, link-local and multicast ranges)")
	f.StringArrayVar(&kf.replicaSelector, "replica-selector", nil, "KEY=VALUE label of the replicas' Pods, the only ones let into sandbox Pods (default app.kubernetes.io/name=cubby; repeatable)")
	f.StringVar(&k.CPURequest, "cpu-request", "", "CPU request of each sandbox Pod (default 100m; the limit is the sandbox's CPU count)")
	f.IntVar(&k.MemoryRequestMB, "memory-request-mb", 0, "memory request of each sandbox Pod in MiB (default 128; the limit is --memory-mb)")
	f.StringVar(&k.Identity, "identity", "", "this replica's name in the leader Lease and Pod annotations (default $POD_NAME, else the host name)")
	f.DurationVar(&k.Election.LeaseDuration, "lease-duration", 0, "leader Lease duration (default 15s)")
	f.DurationVar(&k.Election.RenewDeadline, "lease-renew-deadline", 0, "how long the leader tries to renew before giving up (default 10s)")
	f.DurationVar(&k.Election.RetryPeriod, "lease-retry-period", 0, "how often replicas try to take or renew the Lease (default 2s)")
}

// apply parses the repeatable flags into k.
func (kf kubeFlags) apply(k *server.KubeConfig) error {
	k.HostUsers = !kf.userNamespaces
	var err error
	if k.Images, err = pairs("--template-image", kf.images); err != nil {
		return err
	}
	if k.RuntimeClasses, err = pairs("--runtime-class", kf.runtimeClasses); err != nil {
		return err
	}
	if rc, ok := k.RuntimeClasses["default"]; ok {
		delete(k.RuntimeClasses, "default")
		k.RuntimeClasses[""] = rc
	}
	k.ReplicaSelector, err = pairs("--replica-selector", kf.replicaSelector)
	return err
}

// pairs parses KEY=VALUE flag values (nil for none); a key given twice is
// an error.
func pairs(flag string, vals []string) (map[string]string, error) {
	if len(vals) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, v := range vals {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" || val == "" {
			return nil, fmt.Errorf("%s %q: want KEY=VALUE", flag, v)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("%s: %q given twice", flag, k)
		}
		out[k] = val
	}
	return out, nil
}
