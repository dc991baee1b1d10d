package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/mcpserver"
)

// mcpShutdown bounds killing the session's sandbox after the client left.
const mcpShutdown = 30 * time.Second

func newMCPCmd(client *clientFlags) *cobra.Command {
	var cfg mcpserver.Config
	cmd := &cobra.Command{
		Use:   "mcp",
		Short: "Serve Cubby's sandbox tools to an MCP client over stdio",
		Long: `Serve the Model Context Protocol on stdin/stdout: run_code, run_command,
command_output, command_kill, file_read, file_write, file_list, sandbox_create,
sandbox_list, sandbox_info, sandbox_kill, sandbox_set_timeout, sandbox_pause,
sandbox_resume, get_url and template_list. The tools are a client of a Cubby (or
E2B) server configured like the other client commands (E2B_API_URL, E2B_API_KEY,
--api-url, --api-key). The session's own sandbox is killed when the client
disconnects. Logs go to stderr. cubby serve also serves these tools over
streamable HTTP at /mcp.`,
		Args: cobra.NoArgs,
		RunE: client.run(func(cmd *cobra.Command, _ []string) error {
			cfg.Connection = client.options()
			if cfg.Connection.APIKey == "" {
				return errors.New("no API key: set E2B_API_KEY or pass --api-key (`cubby keys create` on the server host makes one)")
			}
			cfg.Version = Version
			cfg.Log = logger(cmd, false)
			svc := mcpserver.New(cfg)
			err := svc.Server(cfg.Connection).Run(cmd.Context(), &mcp.StdioTransport{})
			ctx, cancel := context.WithTimeout(context.WithoutCancel(cmd.Context()), mcpShutdown)
			defer cancel()
			if cerr := svc.Close(ctx); cerr != nil {
				cfg.Log.Warn("mcp shutdown", "err", cerr)
			}
			if err != nil && !errors.Is(err, context.Canceled) {
				return fmt.Errorf("mcp: %w", err)
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVar(&cfg.Template, "template", mcpserver.DefaultTemplate, "template of the session's own sandbox")
	f.DurationVar(&cfg.SessionIdle, "session-timeout", mcpserver.DefaultSessionIdle, "lifetime of the session's sandbox without a tool call (renewed by each call)")
	client.bind(cmd)
	return cmd
}
