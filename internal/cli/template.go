package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/template"
)

func newTemplateCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "template", Short: "Build and list sandbox templates"}
	var dataDir, templatesDir string
	cmd.PersistentFlags().StringVar(&dataDir, "data-dir", "/var/lib/cubby", "server data directory")
	cmd.PersistentFlags().StringVar(&templatesDir, "templates-dir", "", "directory of built templates (default <data-dir>/templates)")
	dir := func() string {
		if templatesDir != "" {
			return templatesDir
		}
		return filepath.Join(dataDir, "templates")
	}
	var force, buildJSON bool
	build := &cobra.Command{
		Use:   "build <dir|name>",
		Short: "Build a template from a directory with cubby-template.yaml, or a built-in by name",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			def, err := loadDefinition(args[0])
			if err != nil {
				return err
			}
			m := template.NewManager(dir(), logger(cmd, false))
			info, err := m.Build(cmd.Context(), def, os.Stderr, force)
			if err != nil {
				return err
			}
			if buildJSON {
				return writeJSON(cmd.OutOrStdout(), info)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "template %s (id %s) ready: %s, %.1f MiB\n", info.Name, info.ID, info.RootfsDir, float64(info.SizeBytes)/(1<<20))
			return nil
		},
	}
	build.Flags().BoolVar(&force, "force", false, "rebuild even when an identical build exists")
	build.Flags().BoolVar(&buildJSON, "json", false, "print the built template as JSON (build progress stays on stderr)")
	var asJSON bool
	list := &cobra.Command{
		Use:   "list",
		Short: "List built templates",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			m := template.NewManager(dir(), logger(cmd, false))
			infos, err := m.List()
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), infos)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "NAME\tID\tSIZE\tBUILT")
			for _, i := range infos {
				fmt.Fprintf(tw, "%s\t%s\t%.0f MiB\t%s\n", i.Name, i.ID, float64(i.SizeBytes)/(1<<20), i.BuiltAt.Format("2006-01-02 15:04"))
			}
			return tw.Flush()
		},
	}
	list.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.AddCommand(build, list)
	return cmd
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
