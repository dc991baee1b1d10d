package filesystem

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"connectrpc.com/connect"

	"github.com/cubby-dev/cubby/internal/agent/entry"
	pb "github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

// Stat describes one path with lstat semantics (docs/wire/envd.md, Stat): the entry's
// path is the resolved absolute path. Missing (or below a file) → not_found.
func (s *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	_, p, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	e, err := entry.NewBuilder().Build(p, p)
	if errors.Is(err, syscall.ENOTDIR) { // "file.txt/x" does not exist either
		err = fs.ErrNotExist
	}
	if err != nil {
		return nil, fsError("stat", p, err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its missing parents (mode 0755, owned by the
// user). An existing directory → already_exists; an existing non-directory (or a
// file among the parents) → invalid_argument (docs/wire/envd.md, MakeDir).
func (s *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	u, p, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(p)
	switch {
	case err == nil && fi.IsDir():
		return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory '%s' already exists", p))
	case err == nil:
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' already exists and is not a directory", p))
	case errors.Is(err, syscall.ENOTDIR):
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("a parent of '%s' is not a directory", p))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, fsError("stat", p, err)
	}
	if err := entry.MkdirAll(p, int(u.UID), int(u.GID)); err != nil {
		return nil, fsError("make directory", p, err)
	}
	e, err := entry.NewBuilder().Build(p, p)
	if err != nil {
		return nil, fsError("stat", p, err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination, creating the destination's missing parent
// directories for the user. The entry describes the destination. Missing source →
// not_found (docs/wire/envd.md, Move). Moves across filesystems fail (EXDEV → internal).
func (s *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	u, src, err := s.resolve(req.Header(), req.Msg.GetSource())
	if err != nil {
		return nil, err
	}
	dst := u.Resolve(req.Msg.GetDestination(), s.settings.Workdir())
	if _, err := os.Lstat(src); err != nil {
		return nil, fsError("move", src, err)
	}
	if err := entry.MkdirAll(filepath.Dir(dst), int(u.UID), int(u.GID)); err != nil {
		return nil, fsError("make directory", filepath.Dir(dst), err)
	}
	if err := os.Rename(src, dst); err != nil {
		return nil, fsError("move to", dst, err)
	}
	e, err := entry.NewBuilder().Build(dst, dst)
	if err != nil {
		return nil, fsError("stat", dst, err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// Remove deletes a path recursively (`rm -rf`); a missing path (or one below a
// file) is not an error (docs/wire/envd.md, Remove).
func (s *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	_, p, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(p); err != nil && !errors.Is(err, syscall.ENOTDIR) {
		return nil, fsError("remove", p, err)
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// ListDir lists a directory tree down to depth levels (0 counts as 1) in
// filepath.WalkDir order, excluding the directory itself. Entry paths are the
// requested (resolved) path joined with the relative path, even when the requested
// path is a symlink to a directory. Entries vanishing mid-walk are skipped.
// Missing → not_found; not a directory → invalid_argument (docs/wire/envd.md, ListDir).
func (s *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	_, p, err := s.resolve(req.Header(), req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	root, err := dirRoot(p)
	if err != nil {
		return nil, err
	}
	depth := max(int(req.Msg.GetDepth()), 1)
	entries, err := walk(ctx, root, p, depth)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

// dirRoot checks that p is (or links to) a directory and returns its real path.
func dirRoot(p string) (string, error) {
	fi, err := os.Stat(p)
	if err != nil {
		if errors.Is(err, syscall.ENOTDIR) {
			return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' is not a directory", p))
		}
		return "", fsError("stat", p, err)
	}
	if !fi.IsDir() {
		return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("path '%s' is not a directory", p))
	}
	root, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fsError("resolve", p, err)
	}
	return root, nil
}

// walk collects the entries under root (reported under display) up to depth.
func walk(ctx context.Context, root, display string, depth int) ([]*pb.EntryInfo, error) {
	b := entry.NewBuilder()
	entries := []*pb.EntryInfo{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if path == root {
			return err // an unreadable root fails the request
		}
		if err != nil {
			return skip(d) // vanished or unreadable below the root
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return fmt.Errorf("relative path of %s: %w", path, err)
		}
		e, err := b.Build(path, filepath.Join(display, rel))
		if err != nil {
			return skip(d)
		}
		entries = append(entries, e)
		if d.IsDir() && strings.Count(rel, string(filepath.Separator))+1 >= depth {
			return filepath.SkipDir
		}
		return nil
	})
	if err != nil {
		if ctx.Err() != nil {
			return nil, connect.NewError(connect.CodeCanceled, ctx.Err())
		}
		return nil, fsError("list", display, err)
	}
	return entries, nil
}

// skip tells WalkDir to pass over an entry that could not be read.
func skip(d fs.DirEntry) error {
	if d != nil && d.IsDir() {
		return filepath.SkipDir
	}
	return nil
}
