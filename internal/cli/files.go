package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/cubby-dev/cubby/internal/sandboxid"
	"github.com/cubby-dev/cubby/sdk"
)

// location is one side of `cubby files cp`: a local path, or a path in a
// sandbox (Sandbox non-empty) written SANDBOX-ID:/path.
type location struct {
	Sandbox string
	Path    string
}

func (l location) String() string {
	if l.Sandbox == "" {
		return l.Path
	}
	return l.Sandbox + ":" + l.Path
}

// parseLocation splits "ID:/path" into a sandbox location; anything else
// (including paths whose part before ':' contains '/', like ./a:b) is local.
func parseLocation(s string) location {
	id, p, ok := strings.Cut(s, ":")
	if ok && sandboxid.Valid(id) {
		return location{Sandbox: id, Path: p}
	}
	return location{Path: s}
}

// newFilesCmd is `cubby files`: copies between the local machine and a
// sandbox through envd's /files endpoint (docs/wire/envd.md §3.4).
func newFilesCmd(c *clientFlags) *cobra.Command {
	cmd := &cobra.Command{Use: "files", Short: "Copy files to and from sandboxes"}
	c.bind(cmd)
	cp := &cobra.Command{
		Use:     "cp <src> <dst>",
		Aliases: []string{"copy"},
		Short:   "Copy a file between this machine and a sandbox (SANDBOX-ID:/path)",
		Long: `Copy one file between this machine and a sandbox. Sandbox paths are written
SANDBOX-ID:/path (relative paths start at the user's home); - is stdin or stdout.
A destination ending in / or naming a directory receives the file under its own
name. A progress bar is drawn on a terminal for transfers of 1 MiB or more.

  cubby files cp data.csv ID:/home/user/
  cubby files cp ID:/home/user/out.png .
  tar c dir | cubby exec -i ID -- tar x -C /home/user   (directories)`,
		Args: cobra.ExactArgs(2),
		RunE: c.run(func(cmd *cobra.Command, args []string) error {
			src, dst := parseLocation(args[0]), parseLocation(args[1])
			switch {
			case src.Sandbox == "" && dst.Sandbox == "":
				return errors.New("one side must be in a sandbox: SANDBOX-ID:/path")
			case src.Sandbox != "" && dst.Sandbox != "":
				return errors.New("copying between two sandboxes is not supported; copy through this machine")
			}
			t := transfer{c: c, in: cmd.InOrStdin(), out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr()}
			if dst.Sandbox != "" {
				return t.upload(cmd.Context(), src.Path, dst)
			}
			return t.download(cmd.Context(), src, dst.Path)
		}),
	}
	cmd.AddCommand(cp)
	return cmd
}

// transfer is one `files cp`.
type transfer struct {
	c           *clientFlags
	in          io.Reader
	out, errOut io.Writer
}

// connect attaches to the sandbox without a per-request time limit: a large
// transfer may take longer than the default 60 s (Ctrl-C still cancels).
func (t *transfer) connect(ctx context.Context, id string) (*sdk.Sandbox, error) {
	opts := t.c.options()
	opts.RequestTimeout = sdk.NoTimeout
	return sdk.Connect(ctx, id, &sdk.ConnectOptions{ConnectionOptions: opts, Timeout: keepAliveFor})
}

// upload copies the local file src ("-": stdin) to dst in a sandbox.
func (t *transfer) upload(ctx context.Context, src string, dst location) error {
	r, size, closeSrc, err := openLocal(src, t.in)
	if err != nil {
		return err
	}
	defer closeSrc()
	sb, err := t.connect(ctx, dst.Sandbox)
	if err != nil {
		return err
	}
	defer sb.Close()
	p, err := remoteTarget(ctx, sb, dst.Path, filepath.Base(src), src != "-")
	if err != nil {
		return err
	}
	bar := t.progress(fmt.Sprintf("%s → %s:%s", filepath.Base(src), dst.Sandbox, p), size)
	if bar != nil {
		r = bar.Reader(r)
	}
	_, err = sb.Files.WriteReader(ctx, p, r, nil)
	if bar != nil {
		bar.Done()
	}
	if err != nil {
		return fmt.Errorf("upload to %s:%s: %w", dst.Sandbox, p, err)
	}
	return nil
}

// openLocal opens a local source: a regular file, or stdin for "-" (size -1).
func openLocal(src string, in io.Reader) (io.Reader, int64, func(), error) {
	if src == "-" {
		return in, -1, func() {}, nil
	}
	f, err := os.Open(src)
	if err != nil {
		return nil, 0, nil, err
	}
	st, err := f.Stat()
	if err == nil && st.IsDir() {
		err = fmt.Errorf("%s is a directory; copy directories with tar: tar c %s | cubby exec -i ID -- tar x -C /dest", src, src)
	}
	if err != nil {
		f.Close()
		return nil, 0, nil, err
	}
	return f, st.Size(), func() { f.Close() }, nil
}

// remoteTarget resolves the destination path in the sandbox: a path ending in
// "/" or naming a directory gets name appended (haveName false: no name known).
func remoteTarget(ctx context.Context, sb *sdk.Sandbox, p, name string, haveName bool) (string, error) {
	if p == "" {
		return "", errors.New("empty sandbox path; write SANDBOX-ID:/path")
	}
	dir := strings.HasSuffix(p, "/")
	if !dir {
		info, err := sb.Files.GetInfo(ctx, p, nil)
		switch {
		case err == nil:
			dir = info.Type == sdk.FileTypeDir
		case !errors.Is(err, sdk.ErrNotFound):
			return "", err
		}
	}
	if !dir {
		return p, nil
	}
	if !haveName {
		return "", fmt.Errorf("%s is a directory; name the destination file", p)
	}
	return path.Join(p, name), nil
}

// download copies src in a sandbox to the local path dst ("-": stdout).
func (t *transfer) download(ctx context.Context, src location, dst string) error {
	sb, err := t.connect(ctx, src.Sandbox)
	if err != nil {
		return err
	}
	defer sb.Close()
	info, err := sb.Files.GetInfo(ctx, src.Path, nil)
	if err != nil {
		return err
	}
	if info.Type == sdk.FileTypeDir {
		return fmt.Errorf("%s is a directory; copy directories with tar: cubby exec %s -- tar c -C %s . | tar x", src, src.Sandbox, src.Path)
	}
	rc, err := sb.Files.ReadStream(ctx, src.Path, nil)
	if err != nil {
		return err
	}
	defer rc.Close()
	if dst == "-" {
		_, err := io.Copy(t.out, rc)
		return err
	}
	return t.writeLocal(localTarget(dst, path.Base(info.Path)), rc, info.Size)
}

// localTarget resolves a local destination: an existing directory or a path
// ending in "/" receives the file under name.
func localTarget(dst, name string) string {
	if strings.HasSuffix(dst, "/") {
		return filepath.Join(dst, name)
	}
	if st, err := os.Stat(dst); err == nil && st.IsDir() {
		return filepath.Join(dst, name)
	}
	return dst
}

// writeLocal writes r to a temporary file next to dst and renames it into
// place, so a failed download leaves no partial file.
func (t *transfer) writeLocal(dst string, r io.Reader, size int64) error {
	tmp, err := os.CreateTemp(filepath.Dir(dst), "."+filepath.Base(dst)+".cubby-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	w := io.Writer(tmp)
	bar := t.progress(fmt.Sprintf("→ %s", dst), size)
	if bar != nil {
		w = bar.Writer(w)
	}
	_, err = io.Copy(w, r)
	if bar != nil {
		bar.Done()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp.Name(), 0o644)
	}
	if err != nil {
		return fmt.Errorf("download to %s: %w", dst, err)
	}
	return os.Rename(tmp.Name(), dst)
}

// progress returns a bar for a transfer of size bytes when stderr is a
// terminal and the transfer is large (or of unknown size), else nil.
func (t *transfer) progress(label string, size int64) *progress {
	f, ok := t.errOut.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) || (size >= 0 && size < progressMin) {
		return nil
	}
	return newProgress(t.errOut, label, size)
}
