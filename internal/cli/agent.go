package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/agent"
	"github.com/cubby-dev/cubby/internal/agent/initproc"
)

func newAgentCmd() *cobra.Command {
	var addr string
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
			a := agent.New(agent.Config{Addr: addr, Log: logger(cmd, true)})
			return a.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&addr, "listen", ":49983", "envd listen address")
	return cmd
}
