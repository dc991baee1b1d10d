package cli

import (
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/agent"
	"github.com/cubby-dev/cubby/internal/agent/initproc"
)

func newAgentCmd() *cobra.Command {
	var addr string
	var contexts []string
	cmd := &cobra.Command{
		Use:    "agent",
		Short:  "Run the in-sandbox agent (envd protocol); started by cubby inside each sandbox",
		Args:   cobra.NoArgs,
		Hidden: false,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if initproc.IsInit() {
				code, err := initproc.Run()
				if err != nil {
					return err
				}
				os.Exit(code)
			}
			agent.PrewarmThreads(48)
			cfg := agent.Config{Addr: addr, Log: logger(cmd, true)}
			if cmd.Flags().Changed("default-contexts") {
				cfg.DefaultContexts = nonEmpty(contexts)
			}
			a := agent.New(cfg)
			return a.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&addr, "listen", ":49983", "envd listen address")
	cmd.Flags().StringSliceVar(&contexts, "default-contexts", nil, "languages whose code contexts start at boot (default python,javascript; \"\" = none)")
	return cmd
}

// nonEmpty drops empty entries (so --default-contexts "" means none).
func nonEmpty(list []string) []string {
	out := []string{}
	for _, s := range list {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
