package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"

	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
	"golang.org/x/term"

	"github.com/cubby-dev/cubby/sdk"
)

// defaultPtySize is used when stdin is not a terminal.
var defaultPtySize = sdk.PtySize{Cols: 80, Rows: 24}

// newShellCmd is `cubby shell` (and `cubby sandbox connect`): an interactive
// login shell on a PTY in the sandbox (envd Process.Start with a pty, docs/wire/envd.md
// §3.3), the local terminal in raw mode, resized on SIGWINCH.
func newShellCmd(c *clientFlags, use, short string) *cobra.Command {
	var user, cwd string
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Long: short + `.

The local terminal is put in raw mode, so every key (Ctrl-C included) goes to the
sandbox; the command exits with the shell's exit status when the shell exits.
A paused sandbox is resumed; while the shell is open the sandbox is kept alive.`,
		Args: cobra.ExactArgs(1),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			sb, err := c.connect(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			defer sb.Close()
			stop := keepAlive(cmd.Context(), sb)
			defer stop()
			code, err := runShell(cmd.Context(), sb, os.Stdin, cmd.OutOrStdout(), &sdk.PtyOptions{User: user, Cwd: cwd})
			if err != nil {
				return err
			}
			if code != 0 {
				return exitError{code: code}
			}
			return nil
		}),
	}
	cmd.Flags().StringVarP(&user, "user", "u", "", "run the shell as this sandbox user (default: the sandbox's default user)")
	cmd.Flags().StringVarP(&cwd, "cwd", "w", "", "working directory (default: the user's home)")
	return cmd
}

// runShell starts a PTY shell in sb, wires in and out to it and waits for the
// shell to exit, returning its exit status (-1 → 137 when it was killed).
func runShell(ctx context.Context, sb *sdk.Sandbox, in *os.File, out io.Writer, opts *sdk.PtyOptions) (int, error) {
	fd := int(in.Fd())
	tty := term.IsTerminal(fd)
	size := defaultPtySize
	if tty {
		size = termSize(fd)
	}
	o := *opts
	o.Timeout = sdk.NoTimeout
	h, err := sb.Pty.Create(ctx, size, func(b []byte) { _, _ = out.Write(b) }, &o)
	if err != nil {
		return 0, err
	}
	if tty {
		old, err := term.MakeRaw(fd)
		if err != nil {
			_ = h.Kill(context.WithoutCancel(ctx))
			return 0, fmt.Errorf("raw mode: %w", err)
		}
		defer func() { _ = term.Restore(fd, old) }()
		stopResize := forwardResize(ctx, sb, h.PID(), fd)
		defer stopResize()
	}
	go forwardInput(ctx, sb, h.PID(), in)
	res, err := h.Wait(ctx)
	if ctx.Err() != nil {
		_ = h.Kill(context.WithoutCancel(ctx))
		return 0, ctx.Err()
	}
	return exitStatus(res, err)
}

// exitStatus maps a finished command's outcome to a process exit status:
// its exit code, 137 when it was killed by a signal.
func exitStatus(res *sdk.CommandResult, err error) (int, error) {
	var exit *sdk.CommandExitError
	switch {
	case errors.As(err, &exit) && exit.ExitCode < 0:
		return 137, nil
	case errors.As(err, &exit):
		return exit.ExitCode, nil
	case err != nil:
		return 0, err
	}
	return res.ExitCode, nil
}

// termSize reads the terminal size of fd (defaultPtySize when unknown).
func termSize(fd int) sdk.PtySize {
	w, h, err := term.GetSize(fd)
	if err != nil || w <= 0 || h <= 0 {
		return defaultPtySize
	}
	return sdk.PtySize{Cols: uint32(w), Rows: uint32(h)}
}

// forwardResize resizes the remote PTY on every SIGWINCH until stop is called.
func forwardResize(ctx context.Context, sb *sdk.Sandbox, pid uint32, fd int) (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, unix.SIGWINCH)
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case <-ch:
				_ = sb.Pty.Resize(ctx, pid, termSize(fd))
			}
		}
	}()
	return func() { signal.Stop(ch); cancel(); <-done }
}

// forwardInput sends everything read from in to the PTY until in ends or a
// send fails (the shell exited). At end of input it sends Ctrl-D so a shell
// fed from a pipe or file exits.
func forwardInput(ctx context.Context, sb *sdk.Sandbox, pid uint32, in io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := in.Read(buf)
		if n > 0 {
			if sb.Pty.SendInput(ctx, pid, buf[:n]) != nil {
				return
			}
		}
		if err != nil {
			_ = sb.Pty.SendInput(ctx, pid, []byte{4})
			return
		}
	}
}
