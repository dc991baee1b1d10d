package template

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/layer"
)

// copy runs a COPY step: the uploaded archive's entries matching src are
// placed under dest (inside the tree, never through it: the layer is applied
// with every path resolved inside the tree), owned by the step's user (the
// build user by default), with the step's mode when given. It needs no
// sandbox: the layer is the rewritten archive.
func (r *run) copy(ctx context.Context, n string, st Step) error {
	if r.req.Files == nil {
		return fmt.Errorf("COPY %s: %w", st.Args[0], ErrFilesMissing)
	}
	f, digest, err := r.req.Files.Open(r.req.TemplateID, st.FilesHash)
	if err != nil {
		return fmt.Errorf("COPY %s: files hash %s: %w", st.Args[0], st.FilesHash, err)
	}
	defer f.Close()
	owner := r.st.user
	if len(st.Args) > 2 && st.Args[2] != "" {
		owner = st.Args[2]
	}
	u, ok := lookupUser(r.st.tree, owner)
	if !ok {
		return fmt.Errorf("COPY %s: user %q does not exist", st.Args[0], owner)
	}
	c := copyPlan{src: st.Args[0], dest: st.Args[1], uid: u.uid, gid: u.gid, tree: r.st.tree, workdir: r.st.workdir}
	if len(st.Args) > 3 {
		c.mode, c.setMode = copyMode(st.Args[3])
	}
	if err := c.scan(f); err != nil {
		return fmt.Errorf("COPY %s: %w", st.Args[0], err)
	}
	key := r.stepKey(StepCopy, c.src, c.dest, owner, fmt.Sprint(c.mode, c.setMode), digest.String())
	return r.cached(ctx, n, st.describe(), key, st.Force, func(w io.Writer) error {
		if _, err := f.Seek(0, io.SeekStart); err != nil {
			return err
		}
		return c.rewrite(f, w)
	})
}

// copyPlan maps an uploaded archive onto a COPY destination with Docker's
// rules: a matched directory's contents go into dest; a matched file goes
// to dest itself, or into dest when dest ends in "/", is an existing
// directory or more than one source matched.
type copyPlan struct {
	src, dest, tree, workdir string
	uid, gid                 int
	mode                     uint32
	setMode                  bool

	pattern string          // src cleaned, relative to the upload's root
	roots   map[string]bool // matched sources -> is a directory
	destDir bool            // sources go into dest rather than onto it
	target  string          // dest resolved and cleaned (absolute)
}

// scan reads the archive's names to find what src matched.
func (c *copyPlan) scan(f io.Reader) error {
	c.pattern = strings.Trim(path.Clean("/"+strings.TrimPrefix(c.src, "./")), "/")
	c.roots = map[string]bool{}
	err := eachEntry(f, func(hdr *tar.Header, _ io.Reader) error {
		name := strings.Trim(path.Clean("/"+hdr.Name), "/")
		root, ok := c.match(name)
		if !ok {
			return nil
		}
		c.roots[root] = c.roots[root] || hdr.Typeflag == tar.TypeDir || name != root
		return nil
	})
	if err != nil {
		return err
	}
	if len(c.roots) == 0 {
		return fmt.Errorf("the uploaded files contain nothing matching %q", c.src)
	}
	c.target = c.dest
	if !path.IsAbs(c.target) {
		c.target = path.Join(c.workdir, c.target)
	}
	c.target = path.Clean(c.target)
	c.destDir = strings.HasSuffix(c.dest, "/") || len(c.roots) > 1 || layer.IsDir(c.tree, c.target)
	for _, isDir := range c.roots {
		c.destDir = c.destDir || isDir
	}
	return nil
}

// match returns the matched source (name itself or the shortest prefix of
// it matching the pattern) that name belongs to.
func (c *copyPlan) match(name string) (string, bool) {
	if c.pattern == "" { // "." copies the whole upload
		return "", true
	}
	if !strings.ContainsAny(c.pattern, "*?[") {
		if name == c.pattern || strings.HasPrefix(name, c.pattern+"/") {
			return c.pattern, true
		}
		return "", false
	}
	parts := strings.Split(name, "/")
	for i := 1; i <= len(parts); i++ {
		prefix := strings.Join(parts[:i], "/")
		if globMatch(strings.Split(c.pattern, "/"), parts[:i]) {
			return prefix, true
		}
	}
	return "", false
}

// globMatch matches path components against pattern components, where "**"
// matches any number of components and others follow path.Match.
func globMatch(pattern, parts []string) bool {
	if len(pattern) == 0 {
		return len(parts) == 0
	}
	if pattern[0] == "**" {
		for i := 0; i <= len(parts); i++ {
			if globMatch(pattern[1:], parts[i:]) {
				return true
			}
		}
		return false
	}
	if len(parts) == 0 {
		return false
	}
	ok, err := path.Match(pattern[0], parts[0])
	return err == nil && ok && globMatch(pattern[1:], parts[1:])
}

// destination is where entry name (belonging to root) goes, relative to the
// tree root; "" = the entry is not copied.
func (c *copyPlan) destination(name, root string) string {
	var p string
	switch {
	case c.roots[root]: // a directory: its contents into target
		p = path.Join(c.target, strings.TrimPrefix(strings.TrimPrefix(name, root), "/"))
	case c.destDir:
		p = path.Join(c.target, path.Base(name))
	default:
		p = c.target
	}
	return strings.TrimPrefix(p, "/")
}

// rewrite writes the layer: the matched entries under their destinations,
// owned by the step's user, with the step's mode; dest itself first when
// sources go into it.
func (c *copyPlan) rewrite(f io.Reader, w io.Writer) error {
	tw := tar.NewWriter(w)
	now := time.Now()
	if c.destDir && c.target != "/" {
		hdr := &tar.Header{Typeflag: tar.TypeDir, Name: strings.TrimPrefix(c.target, "/") + "/", Mode: 0o755,
			Uid: c.uid, Gid: c.gid, ModTime: now, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
	}
	err := eachEntry(f, func(hdr *tar.Header, body io.Reader) error {
		name := strings.Trim(path.Clean("/"+hdr.Name), "/")
		root, ok := c.match(name)
		if !ok {
			return nil
		}
		return c.write(tw, hdr, c.destination(name, root), body)
	})
	if err != nil {
		return err
	}
	return tw.Close()
}

func (c *copyPlan) write(tw *tar.Writer, hdr *tar.Header, dest string, body io.Reader) error {
	if dest == "" {
		return nil // the root directory itself (dest already written)
	}
	if strings.HasPrefix(path.Base(dest), ".wh.") {
		return fmt.Errorf("%s: names starting with .wh. cannot be copied (OCI whiteout marker)", hdr.Name)
	}
	switch hdr.Typeflag {
	case tar.TypeDir, tar.TypeReg, tar.TypeRegA, tar.TypeSymlink:
	case tar.TypeLink:
		lname := strings.Trim(path.Clean("/"+hdr.Linkname), "/")
		root, ok := c.match(lname)
		if !ok {
			return fmt.Errorf("%s: hard link to %s outside the copied files", hdr.Name, hdr.Linkname)
		}
		hdr.Linkname = c.destination(lname, root)
	default:
		return nil // devices, fifos: not copied
	}
	out := &tar.Header{Typeflag: hdr.Typeflag, Name: dest, Linkname: hdr.Linkname, Size: hdr.Size, Mode: hdr.Mode & 0o7777,
		Uid: c.uid, Gid: c.gid, ModTime: hdr.ModTime, Format: tar.FormatPAX}
	if hdr.Typeflag == tar.TypeDir {
		out.Name += "/"
	}
	if c.setMode && hdr.Typeflag != tar.TypeSymlink && hdr.Typeflag != tar.TypeLink {
		out.Mode = int64(c.mode)
	}
	if err := tw.WriteHeader(out); err != nil {
		return err
	}
	if out.Typeflag == tar.TypeReg || out.Typeflag == tar.TypeRegA {
		if _, err := io.Copy(tw, body); err != nil {
			return err
		}
	}
	return nil
}

// eachEntry calls fn for every entry of a plain or gzip-compressed tar.
func eachEntry(f io.Reader, fn func(*tar.Header, io.Reader) error) error {
	br := bufio.NewReader(f)
	var r io.Reader = br
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return fmt.Errorf("uploaded files: %w", err)
		}
		defer zr.Close()
		r = zr
	}
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("uploaded files are not a tar archive: %w", err)
		}
		if err := fn(hdr, tr); err != nil {
			return err
		}
	}
}
