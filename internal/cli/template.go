package cli

import (
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/server"
	"github.com/cubby-dev/cubby/internal/template"
)

// Defaults of the network `cubby template build` runs build steps on (apart
// from any server's: both may run at once).
const (
	buildBridge = "cubbyb0"
	buildSubnet = "10.76.0.0/24"
)

func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build and list sandbox templates"}
	var dataDir, templatesDir string
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", server.DefaultDataDir, "server data directory")
	cmd.PersistentFlags().StringVar(&templatesDir, "templates-dir", "", "directory of built templates (default <data-dir>/templates)")
	dir := func() string {
		if templatesDir != "" {
			return templatesDir
		}
		return filepath.Join(dataDir, "templates")
	}
	cmd.AddCommand(newTemplateBuildCmd(&dataDir, dir), newTemplateListCmd(dir), newTemplateExportCmd(dir))
	return cmd
}

func newTemplateBuildCmd(dataDir *string, dir func() string) *cobra.Command {
	var cfg server.Config
	var subnet string
	var force, asJSON, userns bool
	build := &cobra.Command{
		Use:   "build <dir|name>",
		Short: "Build a template from a directory with cubby-template.yaml, or a built-in by name",
		Long: `Build a template on this host, without a server: a Debian base from mmdebstrap, then
the definition's files, installs and commands as build steps, each in a sandbox
(cached: an unchanged step is not run again). Build steps get their own bridge
and subnet. Progress is printed as the steps run.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			def, err := loadDefinition(args[0])
			if err != nil {
				return err
			}
			if os.Geteuid() != 0 {
				return fmt.Errorf("template builds must run as root (they start sandboxes)")
			}
			p, err := netip.ParsePrefix(subnet)
			if err != nil {
				return fmt.Errorf("--subnet: %w", err)
			}
			cfg.Subnet, cfg.DataDir, cfg.TemplatesDir, cfg.DisableUserns = p, *dataDir, dir(), !userns
			sa, err := server.NewStandalone(cmd.Context(), cfg, logger(cmd, false))
			if err != nil {
				return err
			}
			defer sa.Close()
			errw := cmd.ErrOrStderr()
			info, err := sa.BuildDefinition(cmd.Context(), def, force, func(e template.Entry) { fmt.Fprintln(errw, e.String()) })
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), info)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "template %s (id %s) ready: %s, %.1f MiB\n", info.Name, info.ID, info.Digest, float64(info.SizeBytes)/(1<<20))
			return nil
		},
	}
	f := build.Flags()
	f.BoolVar(&force, "force", false, "run every step even when a cached result exists")
	f.BoolVar(&asJSON, "json", false, "print the built template as JSON (build progress stays on stderr)")
	f.StringVar(&cfg.Bridge, "bridge", buildBridge, "host bridge of the build sandboxes")
	f.StringVar(&subnet, "subnet", buildSubnet, "address range of the build sandboxes")
	f.StringVar(&cfg.RuncBinary, "runc", "", "runc binary (default: runc next to the cubby binary, built by `make runc`, else on PATH)")
	f.BoolVar(&userns, "userns", !server.Defaults().DisableUserns, "run build steps in their own user namespace, as `cubby serve` runs sandboxes (--userns=false: root inside is host root)")
	f.StringVar(&cfg.RunscBinary, "runsc", "", "gVisor runsc binary (for templates with runtime: runsc)")
	f.StringVar(&cfg.RegistryMirror, "registry-mirror", "", "serve Docker Hub images from this registry (host:port or http://host:port)")
	f.StringVar(&cfg.OutboundCA, "outbound-ca", server.DefaultOutboundCA, `CA bundle build steps trust: "host" (`+"/etc/ssl/certs/ca-certificates.crt"+`), "none" or a PEM file`)
	return build
}

func newTemplateListCmd(dir func() string) *cobra.Command {
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List built templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m, err := template.NewManager(dir(), logger(cmd, false))
			if err != nil {
				return err
			}
			infos, err := m.List()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), infos)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tTAGS\tSIZE\tBUILT")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%v\t%.0f MiB\t%s\n", i.Name, i.ID, i.Tags, float64(i.SizeBytes)/(1<<20), i.BuiltAt.Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return list
}

// loadDefinition reads a definition directory, or falls back to a built-in name.
func loadDefinition(arg string) (template.Definition, error) {
	if st, err := os.Stat(arg); err == nil && st.IsDir() {
		return template.LoadDefinition(arg)
	}
	if def, ok := template.Builtin(arg); ok {
		return def, nil
	}
	return template.Definition{}, fmt.Errorf("%q is neither a directory with cubby-template.yaml nor a built-in template (built-ins: %v)", arg, template.BuiltinNames())
}
