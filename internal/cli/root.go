// Package cli implements the cubby command line with cobra: serve, agent,
// template and the client commands.
package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/userns"
)

// Version is the cubby release, set at build time with -ldflags "-X".
var Version = "dev"

// Main runs the command line with args (without the program name) and returns the
// process exit code.
func Main(args []string) int {
	if len(args) > 0 && args[0] == userns.HelperCommand {
		return userns.HelperMain(args[1:]) // before anything else: it runs per sandbox
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, unix.SIGTERM)
	defer stop()
	root := newRoot()
	root.SetArgs(args)
	if err := root.ExecuteContext(ctx); err != nil {
		var ee exitError
		if errors.As(err, &ee) {
			return ee.code
		}
		fmt.Fprintln(os.Stderr, "cubby:", err)
		return 1
	}
	return 0
}

// exitError carries an exit status through cobra without printing anything.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "cubby",
		Short:         "Self-hosted sandboxes for AI-generated code, compatible with the E2B SDKs",
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       Version,
	}
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn, error")
	client := &clientFlags{}
	run, exec := newRunCmd(client), newExecCmd(client)
	shell := newShellCmd(client, "shell <sandbox-id>", "Open an interactive shell in a sandbox")
	for _, cmd := range []*cobra.Command{run, exec, shell} {
		client.bind(cmd)
	}
	root.AddCommand(newServeCmd(), newAgentCmd(), newOCIHookCmd(), newNetworkCmd(), newEgressProxyCmd(), newTemplateCmd(),
		newSandboxCmd(client), run, exec, shell, newFilesCmd(client), newKeysCmd(), newMCPCmd(client))
	return root
}

// logger builds the process logger from --log-level; json selects JSON output.
func logger(cmd *cobra.Command, json bool) *slog.Logger {
	lvl := slog.LevelInfo
	if s, _ := cmd.Flags().GetString("log-level"); s != "" {
		_ = lvl.UnmarshalText([]byte(strings.ToUpper(s)))
	}
	opts := &slog.HandlerOptions{Level: lvl}
	if json {
		return slog.New(slog.NewJSONHandler(os.Stderr, opts))
	}
	return slog.New(slog.NewTextHandler(os.Stderr, opts))
}
