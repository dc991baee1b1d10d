package ociimage

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// writeTree writes the tree at root as a tar stream in lexical order (so the
// same tree gives the same layer): owners and modes as on disk, hard links as
// links to their first path, device nodes, and extended attributes as PAX
// records. Sockets are skipped (they cannot be archived).
func writeTree(ctx context.Context, w io.Writer, root string) error {
	tw := tar.NewWriter(w)
	links := map[uint64]string{} // inode -> first archived path
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		return writeEntry(tw, p, filepath.ToSlash(rel), links)
	})
	if err != nil {
		return fmt.Errorf("archive %s: %w", root, err)
	}
	return tw.Close()
}

// writeEntry archives the file at p as name.
func writeEntry(tw *tar.Writer, p, name string, links map[uint64]string) error {
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if fi.Mode()&fs.ModeSocket != 0 {
		return nil
	}
	target := ""
	if fi.Mode()&fs.ModeSymlink != 0 {
		if target, err = os.Readlink(p); err != nil {
			return err
		}
	}
	hdr, err := tar.FileInfoHeader(fi, target)
	if err != nil {
		return err
	}
	hdr.Name, hdr.Uname, hdr.Gname, hdr.Format = name, "", "", tar.FormatPAX
	hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{} // reading the tree changes them
	if fi.IsDir() {
		hdr.Name += "/"
	}
	st := fi.Sys().(*syscall.Stat_t)
	hdr.Uid, hdr.Gid = int(st.Uid), int(st.Gid)
	if fi.Mode().IsRegular() && st.Nlink > 1 {
		if first, ok := links[st.Ino]; ok {
			hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
		} else {
			links[st.Ino] = name
		}
	}
	if hdr.PAXRecords, err = xattrs(p); err != nil {
		return err
	}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if hdr.Typeflag != tar.TypeReg {
		return nil
	}
	return copyFile(tw, p)
}

func copyFile(w io.Writer, p string) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(w, f)
	return err
}

// xattrs returns p's extended attributes as PAX records (nil without any).
func xattrs(p string) (map[string]string, error) {
	size, err := unix.Llistxattr(p, nil)
	if err != nil || size == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			err = nil
		}
		return nil, err
	}
	buf := make([]byte, size)
	if size, err = unix.Llistxattr(p, buf); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, key := range strings.Split(string(buf[:size]), "\x00") {
		if key == "" {
			continue
		}
		n, err := unix.Lgetxattr(p, key, nil)
		if err != nil {
			return nil, err
		}
		val := make([]byte, n)
		if n, err = unix.Lgetxattr(p, key, val); err != nil {
			return nil, err
		}
		out["SCHILY.xattr."+key] = string(val[:n])
	}
	return out, nil
}

// writeAgent writes the agent layer: AgentPath (mode 0755, root) and its
// parent directories.
func writeAgent(w io.Writer, binary string) error {
	tw := tar.NewWriter(w)
	f, err := os.Open(binary)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	dirs := []string{"opt/", "opt/cubby/", "opt/cubby/bin/"}
	for _, d := range dirs {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: fi.ModTime()}); err != nil {
			return err
		}
	}
	hdr := &tar.Header{Typeflag: tar.TypeReg, Name: strings.TrimPrefix(AgentPath, "/"), Mode: 0o755, Size: fi.Size(), ModTime: fi.ModTime()}
	if err := tw.WriteHeader(hdr); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return err
	}
	return tw.Close()
}
