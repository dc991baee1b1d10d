package cli

import (
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/agent"
	"github.com/cubby-dev/cubby/internal/agent/initproc"
	"github.com/cubby-dev/cubby/internal/agentapi"
)

func newAgentCmd() *cobra.Command {
	var addr, retired string
	var contexts, preload []string
	var noInterp bool
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
			initproc.CatchSIGPIPE()
			agent.PrewarmThreads(48)
			cfg := agent.Config{Addr: addr, Log: logger(cmd, true)}
			cfg.Boot = bootOptions(cmd, contexts, preload)
			if noInterp {
				cfg.InterpreterAddr = "-"
			}
			a := agent.New(cfg)
			return a.Serve(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&addr, "listen", ":"+strconv.Itoa(agentapi.EnvdPort), "envd listen address")
	cmd.Flags().BoolVar(&noInterp, agentapi.FlagNoInterpreter, false, "run without the code interpreter (template build sandboxes)")
	addBootFlags(cmd, &contexts, &preload)
	addRetiredFlags(cmd, &retired)
	return cmd
}

// retiredInterpreterAuth is the flag earlier servers put on the agent command
// line of sandboxes they created (--interpreter-auth=all). A filesystem-paused
// sandbox keeps that command line, so the agent still accepts the flag, hidden,
// and ignores it: every code-interpreter route now needs a token anyway.
const retiredInterpreterAuth = "interpreter-auth"

// addRetiredFlags declares the agent flags kept only so that sandboxes
// created by earlier servers still boot; their values are ignored.
func addRetiredFlags(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, retiredInterpreterAuth, "", "ignored: every code-interpreter route of a secured sandbox needs a token")
	_ = cmd.Flags().MarkHidden(retiredInterpreterAuth)
}

// addBootFlags declares the code-interpreter boot flags shared by `agent` and
// `serve` (which passes them on to every sandbox's agent).
func addBootFlags(cmd *cobra.Command, contexts, preload *[]string) {
	cmd.Flags().StringSliceVar(contexts, agentapi.FlagDefaultContexts, nil,
		"languages whose code contexts start when a sandbox boots (default python,javascript; \"\" = none, each starts on first use). Deno's JavaScript kernel is ~175 MiB of an idle sandbox")
	cmd.Flags().StringSliceVar(preload, agentapi.FlagPythonPreload, nil,
		"modules the Python fork server imports for kernels (default numpy,pandas,matplotlib,matplotlib.pyplot; \"\" = none: ~45 MiB less per sandbox, a first `import pandas` then takes ~0.7 s)")
}

// bootOptions reads the boot flags; flags not given stay nil (defaults).
func bootOptions(cmd *cobra.Command, contexts, preload []string) agentapi.BootOptions {
	var o agentapi.BootOptions
	if cmd.Flags().Changed(agentapi.FlagDefaultContexts) {
		o.DefaultContexts = nonEmpty(contexts)
	}
	if cmd.Flags().Changed(agentapi.FlagPythonPreload) {
		o.PythonPreload = nonEmpty(preload)
	}
	return o
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
