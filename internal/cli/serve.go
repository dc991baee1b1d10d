package cli

import (
	"fmt"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/admission"
	"github.com/cubby-dev/cubby/internal/pool"
	"github.com/cubby-dev/cubby/internal/server"
)

// Environment variables giving the defaults of the egress flags of serve.
const (
	envEgressResolver   = "CUBBY_EGRESS_RESOLVER"
	envEgressUpstreamCA = "CUBBY_EGRESS_UPSTREAM_CA"
)

// envList splits the comma-separated value of env (nil when unset).
func envList(env string) []string {
	v := os.Getenv(env)
	if v == "" {
		return nil
	}
	return strings.Split(v, ",")
}

func newServeCmd() *cobra.Command {
	cmd, _ := serveCmd()
	return cmd
}

// serveFlags are the flags of `cubby serve`: the configuration they fill
// directly (from server.Defaults until parsed) and the values config parses.
type serveFlags struct {
	cfg                                 server.Config
	subnet                              string
	userns                              bool
	pools, contexts, preload, resolvers []string
	kf                                  kubeFlags
}

// config returns the server configuration the parsed flags of cmd give.
func (sf *serveFlags) config(cmd *cobra.Command) (server.Config, error) {
	cfg := sf.cfg
	if err := sf.kf.apply(&cfg.Kube); err != nil {
		return cfg, err
	}
	p, err := netip.ParsePrefix(sf.subnet)
	if err != nil {
		return cfg, fmt.Errorf("--subnet: %w", err)
	}
	cfg.Subnet, cfg.DisableUserns = p, !sf.userns
	noLimits(&cfg.Admission)
	if len(sf.resolvers) > 0 { // else the server's default, /etc/resolv.conf's
		if cfg.EgressResolvers, err = server.ParseResolvers(sf.resolvers); err != nil {
			return cfg, fmt.Errorf("--egress-resolver: %w", err)
		}
	}
	cfg.Boot = bootOptions(cmd, sf.contexts, sf.preload)
	for _, spec := range sf.pools {
		t, err := pool.ParseTarget(spec)
		if err != nil {
			return cfg, fmt.Errorf("--pool: %w", err)
		}
		cfg.Pool = append(cfg.Pool, t)
	}
	return cfg, nil
}

// serveCmd is `cubby serve` and its flags.
func serveCmd() (*cobra.Command, *serveFlags) {
	sf := &serveFlags{}
	cfg := &sf.cfg
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane (E2B REST API) and the sandbox gateway",
		Long: `Run the Cubby server: the E2B-compatible control plane and the sandbox gateway on
one listener. Point the official SDKs at it with
  E2B_API_URL=http://ADDR  E2B_SANDBOX_URL=http://ADDR  E2B_API_KEY=<key>
On first start the built-in "base" template is built (a few minutes). CUBBY_API_KEY,
when set, is accepted as an API key of the default team; without it an API key is
created on first start and printed once (written to <data-dir>/first-api-key, mode
0600, when the output is not a terminal). Create more keys, for other teams too, with
cubby keys create.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := sf.config(cmd)
			if err != nil {
				return err
			}
			if cfg.Backend != server.BackendKubernetes && os.Geteuid() != 0 {
				return fmt.Errorf("cubby serve must run as root (it creates containers, mounts and network namespaces)")
			}
			cfg.EnvAPIKey = os.Getenv("CUBBY_API_KEY")
			if cfg.Store == "" {
				cfg.Store = os.Getenv(storeEnv) // keeps the password off the command line
			}
			log := logger(cmd, false)
			if err := server.RestrictLogFiles(os.Stdout, os.Stderr); err != nil {
				log.Warn("the server log stays readable by others", "err", err)
			}
			cfg.Version = Version
			return server.Run(cmd.Context(), cfg, log)
		},
	}
	d := server.Defaults()
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", d.Listen, "address of the API and the sandbox gateway")
	f.StringVar(&cfg.DataDir, "data-dir", d.DataDir, "directory for the database, templates and sandboxes")
	f.StringVar(&cfg.TemplatesDir, "templates-dir", "", "directory of built templates (default <data-dir>/templates)")
	f.StringVar(&cfg.Domain, "domain", "", "sandbox domain, host[:port], returned to SDKs for getHost(port) URLs <port>-<sandboxID>.<domain> (default localhost:<listen port>)")
	f.StringVar(&cfg.Bridge, "bridge", d.Bridge,
		"host device (a bridge without ports) holding the sandboxes' gateway address; also names the nftables table cubby_<bridge> and the sandboxes' netns and links")
	f.StringVar(&sf.subnet, "subnet", d.Subnet.String(), "address range of the sandboxes, each routed over its own link")
	f.StringVar(&cfg.RuncBinary, "runc", "", "runc binary (default: runc next to the cubby binary, built by `make runc`, else on PATH)")
	f.BoolVar(&sf.userns, "userns", !d.DisableUserns, "give each sandbox its own user namespace: root inside is an unprivileged host uid of a 65536-id range (--userns=false: root inside is host root)")
	f.StringVar(&cfg.RunDir, "run-dir", "", "directory of the sandboxes' rootfs mount points, reachable by their mapped roots (default /run/cubby/<hash of the data dir>)")
	f.StringVar(&cfg.RunscBinary, "runsc", "", "gVisor runsc binary (default: runsc next to the cubby binary, else on PATH)")
	f.IntVar(&cfg.MemoryMB, "memory-mb", d.MemoryMB, "memory limit of each sandbox in MiB (a cap, not a reservation): the default Python and JavaScript kernels of the code-interpreter template use ~150 MiB")
	f.StringVar(&cfg.Runtime, "runtime", d.Runtime, "default OCI runtime of new sandboxes: runc or runsc (gVisor)")
	f.StringVar(&cfg.DefaultTemplate, "default-template", d.DefaultTemplate, "template used when a create names none; built on first start")
	addBootFlags(cmd, &sf.contexts, &sf.preload)
	f.StringArrayVar(&sf.pools, "pool", nil, "keep a warm pool: TEMPLATE=SIZE booted sandboxes that creates claim in milliseconds (repeatable)")
	f.IntVar(&cfg.PoolMemoryMB, "pool-memory-mb", 0, "memory budget of the warm pools in MiB, measured from their cgroups (default a quarter of the host's RAM)")
	addLimitFlags(cmd, cfg, d)
	f.StringArrayVar(&sf.resolvers, "egress-resolver", envList(envEgressResolver),
		"DNS resolver ADDR[:PORT] the egress proxy resolves names with and forwards sandboxes' allowed queries to (repeatable; default $"+
			envEgressResolver+" (comma-separated), else the nameservers of /etc/resolv.conf)")
	f.StringVar(&cfg.EgressUpstreamCA, "egress-upstream-ca", os.Getenv(envEgressUpstreamCA),
		"PEM file of extra CA certificates the egress proxy trusts when it re-encrypts HTTPS requests it rewrote (network rules; default $"+
			envEgressUpstreamCA+"); the system roots always apply")
	f.StringVar(&cfg.RegistryMirror, "registry-mirror", "", "serve Docker Hub image references (fromImage \"python:3.12\") from this registry: host:port or http://host:port")
	f.StringVar(&cfg.OutboundCA, "outbound-ca", d.OutboundCA, `CA bundle template build steps trust (a TLS-intercepting gateway's CA): "host" (/etc/ssl/certs/ca-certificates.crt), "none" or a PEM file; the proxy variables of the server's environment are passed along`)
	f.BoolVar(&cfg.SandboxOutbound, "sandbox-outbound", false, "also pass the --outbound-ca bundle and the proxy variables to every sandbox (so pip, npm and curl work behind the gateway)")
	f.IntVar(&cfg.BuildConcurrency, "build-concurrency", d.BuildConcurrency, "template builds run at once (later ones wait)")
	f.DurationVar(&cfg.TemplateGCAge, "template-gc-age", d.TemplateGCAge, "remove template trees, layers and cached build steps no template or sandbox uses once they are this old")
	addClusterFlags(cmd, cfg, &sf.kf, d)
	return cmd, sf
}

// addLimitFlags declares the admission limits and listener timeouts of `serve`.
func addLimitFlags(cmd *cobra.Command, cfg *server.Config, d server.Config) {
	f := cmd.Flags()
	a := &cfg.Admission
	f.IntVar(&a.TeamSandboxes, "team-max-sandboxes", d.Admission.TeamSandboxes, "live (running or paused) sandboxes one team may have; 0 = no limit")
	f.IntVar(&a.TeamMemoryMB, "team-max-memory-mb", d.Admission.TeamMemoryMB, "MiB of memory limits the live sandboxes of one team may add up to; 0 = no team limit (--max-memory-mb still applies)")
	f.IntVar(&a.ServerMemoryMB, "max-memory-mb", d.Admission.ServerMemoryMB, fmt.Sprintf("MiB of memory limits all live sandboxes may add up to (default %d times the host's RAM: a limit is a cap, not a reservation)", admission.Overcommit))
	f.Float64Var(&a.CreateRate, "create-rate", d.Admission.CreateRate, "sandbox creates per second one team may make, sustained (warm-pool claims count); 0 = no limit")
	f.IntVar(&a.CreateBurst, "create-burst", d.Admission.CreateBurst, "sandbox creates one team may make at once after being idle")
	f.DurationVar(&cfg.ReadHeaderTimeout, "read-header-timeout", d.ReadHeaderTimeout, "time a client has to send a request's headers")
	f.DurationVar(&cfg.IdleTimeout, "idle-timeout", d.IdleTimeout, "idle keep-alive connections are closed after this long (requests in progress are never cut)")
}

// noLimits turns the admission flags given as 0 ("no limit") into
// server.NoLimit (a zero field of server.Config takes the default); a create
// burst of 0 is 1, the smallest.
func noLimits(a *admission.Limits) {
	if a.TeamSandboxes == 0 {
		a.TeamSandboxes = server.NoLimit
	}
	if a.CreateRate == 0 {
		a.CreateRate = server.NoLimit
	}
	if a.CreateBurst == 0 {
		a.CreateBurst = 1
	}
}
