package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/sdk"
)

// newSandboxCmd is `cubby sandbox`: create, list, info, kill, connect, pause
// and resume over the control-plane REST API (docs/wire/e2b-api.md §2).
func newSandboxCmd(c *clientFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "sandbox",
		Aliases: []string{"sb"},
		Short:   "Create, list, inspect, pause, resume and kill sandboxes",
		Long: `Manage sandboxes on a Cubby (or any E2B-compatible) server.

The server is found like the E2B SDKs find it: E2B_API_KEY, E2B_API_URL,
E2B_SANDBOX_URL and E2B_DOMAIN, or --api-key, --api-url and --sandbox-url.
Without E2B_API_URL and E2B_DOMAIN the local ` + "`cubby serve`" + ` at ` + defaultServerURL + ` is used.`,
	}
	c.bind(cmd)
	cmd.AddCommand(newSandboxCreateCmd(c), newSandboxListCmd(c), newSandboxInfoCmd(c), newSandboxKillCmd(c),
		newShellCmd(c, "connect <sandbox-id>", "Open an interactive shell in a sandbox (same as `cubby shell`)"),
		newSandboxPauseCmd(c), newSandboxResumeCmd(c))
	return cmd
}

func newSandboxCreateCmd(c *clientFlags) *cobra.Command {
	var (
		template  string
		timeout   time.Duration
		meta, env []string
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "create",
		Short: "Create a sandbox and print its ID",
		Args:  cobra.NoArgs,
		RunE: c.run(func(cmd *cobra.Command, _ []string) error {
			md, err := parsePairs("metadata", meta)
			if err != nil {
				return err
			}
			envs, err := parsePairs("env", env)
			if err != nil {
				return err
			}
			sb, err := sdk.Create(cmd.Context(), &sdk.CreateOptions{
				ConnectionOptions: c.options(), Template: template, Timeout: timeout, Metadata: md, Envs: envs,
			})
			if err != nil {
				return err
			}
			defer sb.Close()
			info, err := sb.GetInfo(cmd.Context())
			if err != nil {
				return fmt.Errorf("sandbox %s created, but describing it failed: %w", sb.ID(), err)
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toSandboxJSON(info))
			}
			fmt.Fprintln(cmd.OutOrStdout(), info.SandboxID)
			fmt.Fprintf(cmd.ErrOrStderr(), "sandbox from template %s, killed at %s unless extended; open a shell with: cubby shell %s\n",
				templateName(info), shortTime(info.EndAt), info.SandboxID)
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&template, "template", "t", sdk.DefaultTemplate, "template name or ID")
	f.DurationVar(&timeout, "timeout", sdk.DefaultSandboxTimeout, "lifetime of the sandbox (whole seconds)")
	f.StringArrayVarP(&meta, "metadata", "m", nil, "metadata KEY=VALUE (repeatable)")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE of every process (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the sandbox as JSON")
	return cmd
}

func newSandboxListCmd(c *clientFlags) *cobra.Command {
	var (
		states []string
		meta   []string
		limit  int
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:     "list",
		Aliases: []string{"ls"},
		Short:   "List running and paused sandboxes, newest first",
		Args:    cobra.NoArgs,
		RunE: c.run(func(cmd *cobra.Command, _ []string) error {
			md, err := parsePairs("metadata", meta)
			if err != nil {
				return err
			}
			infos, err := listSandboxes(cmd.Context(), c, states, md, limit)
			if err != nil {
				return err
			}
			if asJSON {
				out := make([]sandboxJSON, len(infos))
				for i := range infos {
					out[i] = toSandboxJSON(&infos[i])
				}
				return writeJSON(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tTEMPLATE\tSTATE\tSTARTED\tENDS\tMETADATA")
			for i := range infos {
				in := &infos[i]
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", in.SandboxID, templateName(in), in.State,
					shortTime(in.StartedAt), shortTime(in.EndAt), formatMetadata(in.Metadata))
			}
			return tw.Flush()
		}),
	}
	f := cmd.Flags()
	f.StringSliceVar(&states, "state", nil, "only these states: running, paused (comma-separated; default both)")
	f.StringArrayVarP(&meta, "metadata", "m", nil, "only sandboxes with metadata KEY=VALUE (repeatable; all must match)")
	f.IntVar(&limit, "limit", 0, "print at most this many sandboxes (0: all)")
	f.BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// listSandboxes pages through the listing until limit sandboxes (0: all).
func listSandboxes(ctx context.Context, c *clientFlags, states []string, md map[string]string, limit int) ([]sdk.SandboxInfo, error) {
	opts := &sdk.ListOptions{ConnectionOptions: c.options(), Metadata: md}
	for _, s := range states {
		switch st := sdk.SandboxState(strings.TrimSpace(s)); st {
		case sdk.StateRunning, sdk.StatePaused:
			opts.State = append(opts.State, st)
		default:
			return nil, fmt.Errorf("--state %q: want running or paused", s)
		}
	}
	if limit < 0 {
		return nil, fmt.Errorf("--limit %d: must not be negative", limit)
	}
	if limit > 0 {
		opts.Limit = min(limit, 100)
	}
	var out []sdk.SandboxInfo
	for info, err := range sdk.List(ctx, opts) {
		if err != nil {
			return nil, err
		}
		out = append(out, info)
		if limit > 0 && len(out) == limit {
			break
		}
	}
	return out, nil
}

func newSandboxInfoCmd(c *clientFlags) *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info <sandbox-id>",
		Short: "Describe a sandbox",
		Args:  cobra.ExactArgs(1),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			opts := c.options()
			info, err := sdk.GetInfo(cmd.Context(), args[0], &opts)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(cmd.OutOrStdout(), toSandboxJSON(info))
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			rows := [][2]string{
				{"ID", info.SandboxID}, {"Template", fmt.Sprintf("%s (%s)", templateName(info), info.TemplateID)},
				{"State", string(info.State)}, {"Started", shortTime(info.StartedAt)}, {"Ends", shortTime(info.EndAt)},
				{"CPUs", fmt.Sprint(info.CPUCount)}, {"Memory", fmt.Sprintf("%d MiB", info.MemoryMB)},
				{"Disk", fmt.Sprintf("%d MiB", info.DiskSizeMB)}, {"envd", info.EnvdVersion},
				{"Metadata", formatMetadata(info.Metadata)},
			}
			if info.PauseMode != "" {
				mode := info.PauseMode
				if info.PauseMethod != "" {
					mode += " (" + info.PauseMethod + ")"
				}
				rows = append(rows, [2]string{"Pause mode", mode})
			}
			for _, r := range rows {
				fmt.Fprintf(tw, "%s:\t%s\n", r[0], r[1])
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newSandboxKillCmd(c *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "kill <sandbox-id>...",
		Short: "Kill sandboxes",
		Args:  cobra.MinimumNArgs(1),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			opts := c.options()
			var errs []error
			for _, id := range args {
				if err := sdk.Kill(cmd.Context(), id, &opts); err != nil {
					errs = append(errs, explain(err, c.serverURL(), opts.APIKey != ""))
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), "killed", id)
			}
			return errors.Join(errs...)
		}),
	}
}

func newSandboxPauseCmd(c *clientFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "pause <sandbox-id>",
		Short: "Pause a sandbox; `cubby sandbox resume` (or any connect) brings it back",
		Args:  cobra.ExactArgs(1),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			ctx, opts := cmd.Context(), c.options()
			info, err := sdk.GetInfo(ctx, args[0], &opts)
			if err != nil {
				return err
			}
			if info.State == sdk.StatePaused {
				fmt.Fprintln(cmd.OutOrStdout(), "already paused", args[0])
				return nil
			}
			sb, err := sdk.Connect(ctx, args[0], &sdk.ConnectOptions{ConnectionOptions: opts})
			if err != nil {
				return err
			}
			defer sb.Close()
			if _, err := sb.Pause(ctx, nil); err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), "paused", args[0])
			return nil
		}),
	}
}

func newSandboxResumeCmd(c *clientFlags) *cobra.Command {
	var timeout time.Duration
	cmd := &cobra.Command{
		Use:   "resume <sandbox-id>",
		Short: "Resume a paused sandbox (on a running one, only extend its life)",
		Args:  cobra.ExactArgs(1),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			sb, err := sdk.Connect(cmd.Context(), args[0], &sdk.ConnectOptions{ConnectionOptions: c.options(), Timeout: timeout})
			if err != nil {
				return err
			}
			defer sb.Close()
			fmt.Fprintln(cmd.OutOrStdout(), "resumed", args[0])
			return nil
		}),
	}
	cmd.Flags().DurationVar(&timeout, "timeout", sdk.DefaultSandboxTimeout, "keep the sandbox alive at least this long from now")
	return cmd
}
