package cli

import (
	"fmt"
	"net/netip"
	"os"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/pool"
	"github.com/cubby-dev/cubby/internal/server"
)

func newServeCmd() *cobra.Command {
	var cfg server.Config
	var subnet string
	var pools, contexts, preload []string
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the control plane (E2B REST API) and the sandbox gateway",
		Long: `Run the Cubby server: the E2B-compatible control plane and the sandbox gateway on
one listener. Point the official SDKs at it with
  E2B_API_URL=http://ADDR  E2B_SANDBOX_URL=http://ADDR  E2B_API_KEY=<key>
On first start the built-in "base" template is built (a few minutes) and an API key
is printed once. CUBBY_API_KEY, when set, is accepted as an API key too.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if os.Geteuid() != 0 {
				return fmt.Errorf("cubby serve must run as root (it creates containers, mounts and network namespaces)")
			}
			p, err := netip.ParsePrefix(subnet)
			if err != nil {
				return fmt.Errorf("--subnet: %w", err)
			}
			cfg.Subnet = p
			cfg.Boot = bootOptions(cmd, contexts, preload)
			for _, spec := range pools {
				t, err := pool.ParseTarget(spec)
				if err != nil {
					return fmt.Errorf("--pool: %w", err)
				}
				cfg.Pool = append(cfg.Pool, t)
			}
			cfg.EnvAPIKey = os.Getenv("CUBBY_API_KEY")
			return server.Run(cmd.Context(), cfg, logger(cmd, false))
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Listen, "listen", "127.0.0.1:3000", "address of the API and the sandbox gateway")
	f.StringVar(&cfg.DataDir, "data-dir", "/var/lib/cubby", "directory for the database, templates and sandboxes")
	f.StringVar(&cfg.TemplatesDir, "templates-dir", "", "directory of built templates (default <data-dir>/templates)")
	f.StringVar(&cfg.Domain, "domain", "", "domain for <port>-<sandboxID>.<domain> host routing (returned to SDKs)")
	f.StringVar(&cfg.Bridge, "bridge", "cubby0", "host bridge the sandboxes attach to")
	f.StringVar(&subnet, "subnet", "10.77.0.0/16", "address range of the sandboxes")
	f.StringVar(&cfg.RuncBinary, "runc", "runc", "runc binary")
	f.StringVar(&cfg.RunscBinary, "runsc", "", "gVisor runsc binary (default: runsc next to the cubby binary, else on PATH)")
	f.IntVar(&cfg.MemoryMB, "memory-mb", 1024, "memory limit of each sandbox in MiB (a cap, not a reservation): the default Python and JavaScript kernels of the code-interpreter template use ~300 MiB")
	f.StringVar(&cfg.Runtime, "runtime", "runc", "default OCI runtime of new sandboxes: runc or runsc (gVisor)")
	f.StringVar(&cfg.DefaultTemplate, "default-template", "base", "template used when a create names none; built on first start")
	addBootFlags(cmd, &contexts, &preload)
	f.StringArrayVar(&pools, "pool", nil, "keep a warm pool: TEMPLATE=SIZE booted sandboxes that creates claim in milliseconds (repeatable)")
	f.IntVar(&cfg.PoolMemoryMB, "pool-memory-mb", 0, "memory budget of the warm pools in MiB, measured from their cgroups (default a quarter of the host's RAM)")
	return cmd
}
