package controlplane

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/store"
)

// Defaults of the volume content API for entries created without uid, gid or
// mode: the templates' default user (uid and gid 1000), 0644 files, 0755
// directories.
const (
	volumeDefaultID   = 1000
	volumeDefaultFile = 0o644
	volumeDefaultDir  = 0o755
	volumeMaxDepth    = 32
)

// VolumeContentPrefix is the path prefix of the volume content API.
const VolumeContentPrefix = "/volumecontent/"

// volumeEntry is E2B's VolumeEntryStat: path is relative to the volume's root
// with a leading "/", mode the permission bits, times RFC 3339.
type volumeEntry struct {
	Name   string    `json:"name"`
	Type   string    `json:"type"` // file, directory, symlink, unknown
	Path   string    `json:"path"`
	Size   int64     `json:"size"`
	Mode   uint32    `json:"mode"`
	UID    uint32    `json:"uid"`
	GID    uint32    `json:"gid"`
	Atime  time.Time `json:"atime"`
	Mtime  time.Time `json:"mtime"`
	Ctime  time.Time `json:"ctime"`
	Target string    `json:"target,omitempty"`
}

// VolumeContentHandler serves E2B's volume content API under /volumecontent/
// (docs/volumes.md), authenticated with a volume's token (Authorization:
// Bearer) instead of an API key: GET/PATCH/DELETE /volumecontent/{id}/path,
// GET/POST /volumecontent/{id}/dir, GET/PUT /volumecontent/{id}/file, each
// with ?path=. Paths are resolved inside the volume (os.Root): "..", absolute
// symlinks and symlinks leading out are refused with 400. Errors are E2B's
// {code, message}: 401 bad token or unknown volume, 404 missing path, 507 the
// volume is full.
func (s *Service) VolumeContentHandler() http.Handler {
	mux := http.NewServeMux()
	for _, rt := range []struct {
		pattern string
		op      func(*volumeOp) error
	}{
		{"GET /volumecontent/{volumeID}/path", (*volumeOp).stat},
		{"PATCH /volumecontent/{volumeID}/path", (*volumeOp).patch},
		{"DELETE /volumecontent/{volumeID}/path", (*volumeOp).remove},
		{"GET /volumecontent/{volumeID}/dir", (*volumeOp).list},
		{"POST /volumecontent/{volumeID}/dir", (*volumeOp).mkdir},
		{"GET /volumecontent/{volumeID}/file", (*volumeOp).read},
		{"PUT /volumecontent/{volumeID}/file", (*volumeOp).write},
	} {
		mux.HandleFunc(rt.pattern, func(w http.ResponseWriter, r *http.Request) { s.serveVolumeOp(w, r, rt.op) })
	}
	return jsonFallback(mux)
}

// volumeOp is one content API request on an opened volume.
type volumeOp struct {
	w    http.ResponseWriter
	r    *http.Request
	root *os.Root
	rel  string // the cleaned path inside the volume, "." for its root
}

func (s *Service) serveVolumeOp(w http.ResponseWriter, r *http.Request, op func(*volumeOp) error) {
	v, err := s.store.GetVolume(r.Context(), r.PathValue("volumeID"))
	token, _ := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if err != nil || subtle.ConstantTimeCompare([]byte(token), []byte(v.Token)) != 1 {
		if err != nil && !errors.Is(err, store.ErrNotFound) {
			s.log.Error("volume content: read volume", "err", err)
		}
		writeError(w, http.StatusUnauthorized, "invalid volume token")
		return
	}
	rel, err := volumePath(r.URL.Query().Get("path"))
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	root, err := s.backend.OpenVolume(r.Context(), v.ID)
	if err != nil {
		httpAPI{s}.fail(w, r, err)
		return
	}
	defer root.Close()
	if err := op(&volumeOp{w: w, r: r, root: root, rel: rel}); err != nil {
		writeVolumeError(w, r, err)
	}
}

// volumePath cleans a content API path into one relative to the volume's
// root; ".." components are refused.
func volumePath(p string) (string, error) {
	if p == "" {
		return "", errors.New("path is required")
	}
	for _, c := range strings.Split(p, "/") {
		if c == ".." {
			return "", fmt.Errorf("path %q escapes the volume", p)
		}
	}
	clean := path.Clean("/" + p)
	if clean == "/" {
		return ".", nil
	}
	return clean[1:], nil
}

// writeVolumeError answers a failed content operation in E2B's error shape.
func writeVolumeError(w http.ResponseWriter, r *http.Request, err error) {
	var he *httpError
	switch {
	case errors.As(err, &he):
		writeError(w, he.status, he.msg)
	case errors.Is(err, fs.ErrNotExist):
		writeError(w, http.StatusNotFound, fmt.Sprintf("path %q not found", r.URL.Query().Get("path")))
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		writeError(w, http.StatusInsufficientStorage, "the volume is full")
	case strings.Contains(err.Error(), "escapes"):
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path %q escapes the volume", r.URL.Query().Get("path")))
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.ENOTEMPTY):
		writeError(w, http.StatusConflict, err.Error())
	default:
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}

// entry stats rel without following a symlink in its last component.
func (o *volumeOp) entry(rel string) (volumeEntry, error) {
	fi, err := o.root.Lstat(rel)
	if err != nil {
		return volumeEntry{}, err
	}
	e := volumeEntry{Name: fi.Name(), Path: "/" + strings.TrimPrefix(rel, "."), Size: fi.Size(), Mode: uint32(fi.Mode().Perm()), Type: "unknown"}
	if rel == "." {
		e.Name, e.Path = "", "/"
	}
	switch {
	case fi.Mode().IsRegular():
		e.Type = "file"
	case fi.IsDir():
		e.Type = "directory"
	case fi.Mode()&fs.ModeSymlink != 0:
		e.Type = "symlink"
		e.Target, _ = o.root.Readlink(rel)
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.UID, e.GID = st.Uid, st.Gid
		e.Atime = time.Unix(st.Atim.Unix()).UTC()
		e.Mtime = time.Unix(st.Mtim.Unix()).UTC()
		e.Ctime = time.Unix(st.Ctim.Unix()).UTC()
	}
	return e, nil
}

func (o *volumeOp) answer(status int, rel string) error {
	e, err := o.entry(rel)
	if err != nil {
		return err
	}
	writeJSON(o.w, status, e)
	return nil
}

func (o *volumeOp) stat() error { return o.answer(http.StatusOK, o.rel) }

// owner reads uid, gid and mode from the query (defaults above; def is the mode's).
func (o *volumeOp) owner(def fs.FileMode) (uid, gid int, mode fs.FileMode, err error) {
	q := o.r.URL.Query()
	num := func(name string, dflt, base int) int {
		v := q.Get(name)
		if v == "" || err != nil {
			return dflt
		}
		n, perr := strconv.ParseUint(v, base, 32)
		if perr != nil {
			err = badRequest(fmt.Sprintf("%s %q is not a number", name, v))
		}
		return int(n)
	}
	uid, gid = num("uid", volumeDefaultID, 10), num("gid", volumeDefaultID, 10)
	mode = fs.FileMode(num("mode", int(def), 10)) & fs.ModePerm
	return uid, gid, mode, err
}

func (o *volumeOp) patch() error {
	var b struct {
		UID  *uint32 `json:"uid"`
		GID  *uint32 `json:"gid"`
		Mode *uint32 `json:"mode"`
	}
	if err := json.NewDecoder(io.LimitReader(o.r.Body, 1<<16)).Decode(&b); err != nil && !errors.Is(err, io.EOF) {
		return badRequest("malformed JSON body: " + err.Error())
	}
	if _, err := o.root.Lstat(o.rel); err != nil {
		return err
	}
	if b.UID != nil || b.GID != nil {
		uid, gid := -1, -1
		if b.UID != nil {
			uid = int(*b.UID)
		}
		if b.GID != nil {
			gid = int(*b.GID)
		}
		if err := o.root.Lchown(o.rel, uid, gid); err != nil {
			return err
		}
	}
	if b.Mode != nil {
		if err := o.root.Chmod(o.rel, fs.FileMode(*b.Mode)&fs.ModePerm); err != nil {
			return err
		}
	}
	return o.answer(http.StatusOK, o.rel)
}

func (o *volumeOp) remove() error {
	if o.rel == "." {
		return badRequest("the volume's root cannot be removed")
	}
	if _, err := o.root.Lstat(o.rel); err != nil {
		return err
	}
	if err := o.root.RemoveAll(o.rel); err != nil {
		return err
	}
	o.w.WriteHeader(http.StatusNoContent)
	return nil
}

func (o *volumeOp) list() error {
	depth := 1
	if v := o.r.URL.Query().Get("depth"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > volumeMaxDepth {
			return badRequest(fmt.Sprintf("depth must be in 1..%d", volumeMaxDepth))
		}
		depth = n
	}
	out := []volumeEntry{}
	if err := o.walk(o.rel, depth, &out); err != nil {
		return err
	}
	writeJSON(o.w, http.StatusOK, out)
	return nil
}

// walk appends the entries of directory rel, and of its subdirectories down
// to depth levels (symlinks are listed, not followed).
func (o *volumeOp) walk(rel string, depth int, out *[]volumeEntry) error {
	f, err := o.root.Open(rel)
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return &httpError{status: http.StatusBadRequest, msg: fmt.Sprintf("%s is not a directory", "/"+strings.TrimPrefix(rel, "."))}
	}
	for _, n := range names {
		child := path.Join(rel, n)
		e, err := o.entry(child)
		if err != nil {
			continue // removed meanwhile
		}
		*out = append(*out, e)
		if e.Type == "directory" && depth > 1 {
			if err := o.walk(child, depth-1, out); err != nil {
				return err
			}
		}
	}
	return nil
}

func (o *volumeOp) mkdir() error {
	uid, gid, mode, err := o.owner(volumeDefaultDir)
	if err != nil {
		return err
	}
	if o.r.URL.Query().Get("force") == "true" {
		err = o.root.MkdirAll(o.rel, mode)
	} else {
		err = o.root.Mkdir(o.rel, mode)
	}
	if err != nil {
		return err
	}
	return o.created(uid, gid, mode)
}

// created gives the entry just created its owner and mode (past the umask)
// and answers 201 with it.
func (o *volumeOp) created(uid, gid int, mode fs.FileMode) error {
	if err := o.root.Lchown(o.rel, uid, gid); err != nil {
		return err
	}
	if err := o.root.Chmod(o.rel, mode); err != nil {
		return err
	}
	return o.answer(http.StatusCreated, o.rel)
}

func (o *volumeOp) read() error {
	f, err := o.root.Open(o.rel)
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return badRequest(fmt.Sprintf("/%s is not a file", o.rel))
	}
	o.w.Header().Set("Content-Type", "application/octet-stream")
	o.w.WriteHeader(http.StatusOK)
	_, _ = io.Copy(o.w, f)
	return nil
}

func (o *volumeOp) write() error {
	uid, gid, mode, err := o.owner(volumeDefaultFile)
	if err != nil {
		return err
	}
	if o.rel == "." {
		return badRequest("path names the volume's root")
	}
	if o.r.URL.Query().Get("force") == "true" {
		if err := o.root.MkdirAll(path.Dir(o.rel), volumeDefaultDir); err != nil {
			return err
		}
	}
	f, err := o.root.OpenFile(o.rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(f, o.r.Body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = o.root.Remove(o.rel) // no half-written file (a full volume, a client gone)
		return err
	}
	return o.created(uid, gid, mode)
}
