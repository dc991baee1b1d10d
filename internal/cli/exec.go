package cli

import (
	"context"
	"errors"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/sdk"
)

// execJSON is the --json result of `cubby exec`.
type execJSON struct {
	ExitCode int    `json:"exitCode"`
	Stdout   string `json:"stdout"`
	Stderr   string `json:"stderr"`
	// Error is envd's text for an unclean exit ("exit status 3", "signal: killed").
	Error string `json:"error,omitempty"`
}

// newExecCmd is `cubby exec SANDBOX -- CMD...`: a command run through envd's
// process service (docs/wire/envd.md §3.3) with its output streamed and its exit status
// propagated.
func newExecCmd(c *clientFlags) *cobra.Command {
	var (
		user, cwd string
		env       []string
		timeout   time.Duration
		stdin     bool
		asJSON    bool
	)
	cmd := &cobra.Command{
		Use:   "exec <sandbox-id> [flags] -- <command> [args...]",
		Short: "Run a command in a sandbox, streaming its output; exits with its status",
		Long: `Run a command in a sandbox with bash -l -c, streaming its stdout and stderr.
cubby exits with the command's exit status (137 when it was killed by a signal).

One argument after -- is a shell command line ('ls | wc -l'); several arguments
are quoted as words (-- ls -l "my dir"). With -i, local stdin is sent to the
command, e.g. tar c dir | cubby exec -i ID -- tar x -C /tmp.`,
		Args: cobra.MinimumNArgs(2),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); dash != 1 {
				return errors.New("usage: cubby exec <sandbox-id> [flags] -- <command> [args...]")
			}
			envs, err := parsePairs("env", env)
			if err != nil {
				return err
			}
			sb, err := c.connect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer sb.Close()
			stop := keepAlive(cmd.Context(), sb)
			defer stop()
			if timeout == 0 {
				timeout = sdk.NoTimeout
			}
			opts := &sdk.CommandOptions{Envs: envs, Cwd: cwd, User: user, Timeout: timeout, Stdin: stdin}
			if !asJSON {
				opts.OnStdout = func(s string) { _, _ = io.WriteString(cmd.OutOrStdout(), s) }
				opts.OnStderr = func(s string) { _, _ = io.WriteString(cmd.ErrOrStderr(), s) }
			}
			res, err := runCommand(cmd.Context(), sb, commandLine(args[1:]), opts, cmd.InOrStdin())
			code, serr := exitStatus(res, err)
			if serr != nil {
				return serr
			}
			if asJSON {
				if err := writeJSON(cmd.OutOrStdout(), execResult(res, err)); err != nil {
					return err
				}
			}
			if code != 0 {
				return exitError{code: code}
			}
			return nil
		}),
	}
	f := cmd.Flags()
	f.StringVarP(&user, "user", "u", "", "run as this sandbox user (default: the sandbox's default user)")
	f.StringVarP(&cwd, "cwd", "w", "", "working directory (default: the user's home); must exist")
	f.StringArrayVarP(&env, "env", "e", nil, "environment variable KEY=VALUE (repeatable)")
	f.DurationVar(&timeout, "timeout", 0, "kill the command after this long (0: no limit)")
	f.BoolVarP(&stdin, "stdin", "i", false, "send local stdin to the command")
	f.BoolVar(&asJSON, "json", false, "print {exitCode, stdout, stderr} as JSON instead of streaming")
	return cmd
}

// runCommand runs line in sb; with opts.Stdin it copies in to the command's
// stdin and closes it at end of input. Cancelling ctx kills the command.
func runCommand(ctx context.Context, sb *sdk.Sandbox, line string, opts *sdk.CommandOptions, in io.Reader) (*sdk.CommandResult, error) {
	if !opts.Stdin {
		return sb.Commands.Run(ctx, line, opts)
	}
	h, err := sb.Commands.Start(ctx, line, opts)
	if err != nil {
		return nil, err
	}
	go copyStdin(ctx, h, in)
	res, err := h.Wait(ctx)
	if ctx.Err() != nil {
		_ = h.Kill(context.WithoutCancel(ctx))
	}
	return res, err
}

// copyStdin sends in to the command's stdin in chunks and closes it at EOF.
func copyStdin(ctx context.Context, h *sdk.CommandHandle, in io.Reader) {
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 && h.SendStdin(ctx, buf[:n]) != nil {
			return
		}
		if err != nil {
			_ = h.CloseStdin(ctx)
			return
		}
	}
}

// execResult builds the --json result from a finished command.
func execResult(res *sdk.CommandResult, err error) execJSON {
	var exit *sdk.CommandExitError
	if errors.As(err, &exit) {
		return execJSON{ExitCode: exit.ExitCode, Stdout: exit.Stdout, Stderr: exit.Stderr, Error: exit.Message}
	}
	return execJSON{ExitCode: res.ExitCode, Stdout: res.Stdout, Stderr: res.Stderr, Error: res.Error}
}

// commandLine turns exec's arguments into a bash command line: a single
// argument is used as is, several are each single-quoted.
func commandLine(args []string) string {
	if len(args) == 1 {
		return args[0]
	}
	quoted := make([]string, len(args))
	for i, a := range args {
		quoted[i] = shellQuote(a)
	}
	return strings.Join(quoted, " ")
}

// shellQuote quotes s for bash; words of safe characters stay bare.
func shellQuote(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:,+@%") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
