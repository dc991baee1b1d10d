package files

import (
	"bytes"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/cubby-dev/cubby/internal/agent/users"
)

// download serves GET /files (docs/wire/envd.md): gzipped whenever the client
// accepts gzip and asks for no range (as E2B's envd does), else the bytes through
// http.ServeContent (ranges, conditional requests, type by extension); a file
// whose size stat reports as 0 although it has content (procfs, sysfs) is
// streamed as read. Content-Disposition "inline; filename=<base>" and Vary:
// Accept-Encoding. Missing → 404, directory or special file → 400, no
// acceptable encoding → 406.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, u *users.User) {
	p := u.Resolve(r.URL.Query().Get("path"), h.settings.Workdir())
	f, err := os.Open(p)
	if err != nil {
		h.openError(w, p, err)
		return
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("stat '%s': %v", p, err))
		return
	}
	if fi.IsDir() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is a directory", p))
		return
	}
	if !fi.Mode().IsRegular() {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("path '%s' is not a regular file", p))
		return
	}
	hdr := w.Header()
	hdr.Add("Vary", "Accept-Encoding")
	hdr.Set("Content-Disposition", mime.FormatMediaType("inline", map[string]string{"filename": filepath.Base(p)}))
	enc, ok := negotiate(r.Header.Get("Accept-Encoding"), r.Header.Get("Range") == "")
	if !ok {
		writeError(w, http.StatusNotAcceptable, "no acceptable content encoding (identity or gzip)")
		return
	}
	switch {
	case enc == "gzip":
		h.serveGzip(w, r, f, fi)
	case fi.Size() == 0:
		h.serveUnsized(w, r, f, fi)
	default:
		http.ServeContent(w, r, filepath.Base(p), fi.ModTime(), f)
	}
}

// serveUnsized serves a file whose stat size is 0: an empty file as
// ServeContent would (Content-Length: 0), a virtual file (procfs, sysfs) by
// streaming what reading it gives, without Content-Length or ranges.
func (h *Handler) serveUnsized(w http.ResponseWriter, r *http.Request, f *os.File, fi fs.FileInfo) {
	head := make([]byte, 512)
	n, err := f.Read(head)
	if n == 0 {
		if err != nil && err != io.EOF {
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("read '%s': %v", f.Name(), err))
			return
		}
		http.ServeContent(w, r, filepath.Base(f.Name()), fi.ModTime(), f)
		return
	}
	hdr := w.Header()
	ctype := mime.TypeByExtension(filepath.Ext(fi.Name()))
	if ctype == "" {
		ctype = http.DetectContentType(head[:n])
	}
	hdr.Set("Content-Type", ctype)
	hdr.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	if _, err := io.Copy(w, io.MultiReader(bytes.NewReader(head[:n]), f)); err != nil {
		h.log.Warn("send file", "path", f.Name(), "err", err)
	}
}

// openError maps an open failure to the REST error of /files (docs/wire/envd.md).
func (h *Handler) openError(w http.ResponseWriter, p string, err error) {
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		writeError(w, http.StatusNotFound, fmt.Sprintf("path '%s' does not exist", p))
	case errors.Is(err, fs.ErrPermission):
		writeError(w, http.StatusForbidden, fmt.Sprintf("open '%s': %v", p, err))
	default:
		writeError(w, http.StatusInternalServerError, fmt.Sprintf("open '%s': %v", p, err))
	}
}

// serveGzip sends f gzip-compressed (no Content-Length, no ranges). It reads f
// once from the start without seeking, so virtual files (procfs) work too.
func (h *Handler) serveGzip(w http.ResponseWriter, r *http.Request, f *os.File, fi fs.FileInfo) {
	hdr := w.Header()
	var src io.Reader = f
	ctype := mime.TypeByExtension(filepath.Ext(fi.Name()))
	if ctype == "" {
		head := make([]byte, 512)
		n, err := io.ReadFull(f, head)
		if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
			writeError(w, http.StatusInternalServerError, fmt.Sprintf("read '%s': %v", f.Name(), err))
			return
		}
		ctype = http.DetectContentType(head[:n])
		src = io.MultiReader(bytes.NewReader(head[:n]), f)
	}
	hdr.Set("Content-Type", ctype)
	hdr.Set("Content-Encoding", "gzip")
	hdr.Set("Last-Modified", fi.ModTime().UTC().Format(http.TimeFormat))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	zw := gzip.NewWriter(w)
	if _, err := io.Copy(zw, src); err != nil {
		h.log.Warn("send file", "path", f.Name(), "err", err)
		return
	}
	if err := zw.Close(); err != nil {
		h.log.Warn("send file", "path", f.Name(), "err", err)
	}
}

// negotiate picks the response coding from an Accept-Encoding value (RFC 9110
// §12.5.3): "gzip" when gzip is acceptable and preferGzip, else "identity" when
// acceptable, else gzip when only it is acceptable; ok is false when neither is.
func negotiate(header string, preferGzip bool) (enc string, ok bool) {
	gzipQ, identityQ := qualities(header)
	switch {
	case gzipQ > 0 && (preferGzip || identityQ == 0):
		return "gzip", true
	case identityQ > 0:
		return "identity", true
	default:
		return "", false
	}
}

// qualities returns the q-values of gzip and identity in an Accept-Encoding
// value. Unlisted gzip takes the "*" weight (else 0); unlisted identity takes the
// "*" weight when given, else 1.
func qualities(header string) (gzipQ, identityQ float64) {
	gzipQ, identityQ, star := -1, -1, -1.0
	for _, item := range strings.Split(header, ",") {
		coding, params, _ := strings.Cut(item, ";")
		coding = strings.ToLower(strings.TrimSpace(coding))
		q := 1.0
		if v, found := strings.CutPrefix(strings.TrimSpace(params), "q="); found {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				q = f
			}
		}
		switch coding {
		case "gzip", "x-gzip":
			gzipQ = q
		case "identity":
			identityQ = q
		case "*":
			star = q
		}
	}
	if gzipQ < 0 {
		gzipQ = max(star, 0)
	}
	if identityQ < 0 {
		identityQ = 1
		if star >= 0 {
			identityQ = star
		}
	}
	return gzipQ, identityQ
}
