package files

import (
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cubby-dev/cubby/internal/agent/users"
)

// errBadRequest marks a malformed upload request (400).
var errBadRequest = errors.New("bad request")

// uploaded is one element of the upload response array (docs/wire/envd.md); absent
// metadata is omitted rather than null.
type uploaded struct {
	Name     string            `json:"name"`
	Path     string            `json:"path"`
	Type     string            `json:"type"`
	Metadata map[string]string `json:"metadata,omitempty"`
}

// upload serves POST /files (docs/wire/envd.md): a multipart/form-data body (parts
// named "file", each written to the `path` query or else to its filename) or an
// application/octet-stream body written to the `path` query, optionally with
// Content-Encoding: gzip. X-Metadata-* headers become the files' metadata. 200
// with the array of written files; 400 for a malformed request, 507 when the disk
// is full (nothing partial is left behind), 500 otherwise.
func (h *Handler) upload(w http.ResponseWriter, r *http.Request, u *users.User) {
	res, err := h.receive(r, u)
	if err != nil {
		h.uploadError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// receive decodes the request body and writes the files it carries.
func (h *Handler) receive(r *http.Request, u *users.User) ([]uploaded, error) {
	md, err := parseMetadata(r.Header)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadRequest, err)
	}
	body, err := decodedBody(r)
	if err != nil {
		return nil, err
	}
	defer body.Close()
	mt, params, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil {
		return nil, fmt.Errorf("%w: content type %q: %w", errBadRequest, r.Header.Get("Content-Type"), err)
	}
	switch mt {
	case "multipart/form-data":
		return h.receiveMultipart(r, u, body, params["boundary"], md)
	case "application/octet-stream":
		return h.receiveStream(r, u, body, md)
	default:
		return nil, fmt.Errorf("%w: unsupported content type %q (want multipart/form-data or application/octet-stream)", errBadRequest, mt)
	}
}

// decodedBody undoes an optional Content-Encoding: gzip of the request body.
func decodedBody(r *http.Request) (io.ReadCloser, error) {
	switch enc := strings.ToLower(strings.TrimSpace(r.Header.Get("Content-Encoding"))); enc {
	case "", "identity":
		return r.Body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bodyReader{r.Body})
		if err != nil {
			return nil, fmt.Errorf("%w: gzip body: %w", errBadRequest, err)
		}
		return zr, nil
	default:
		return nil, fmt.Errorf("%w: unsupported content encoding %q", errBadRequest, enc)
	}
}

// receiveStream writes an octet-stream body to the required `path` query.
func (h *Handler) receiveStream(r *http.Request, u *users.User, body io.Reader, md map[string]string) ([]uploaded, error) {
	p := r.URL.Query().Get("path")
	if p == "" {
		return nil, fmt.Errorf("%w: the path query parameter is required for application/octet-stream", errBadRequest)
	}
	dest := u.Resolve(p, h.settings.Workdir())
	if err := checkSpace(r, dest); err != nil {
		return nil, err
	}
	stored, err := h.writeFile(u, dest, body, md)
	if err != nil {
		return nil, err
	}
	return []uploaded{result(dest, stored)}, nil
}

// receiveMultipart writes every part named "file" in order. The same destination
// twice is refused with 400 (files written before stay).
func (h *Handler) receiveMultipart(r *http.Request, u *users.User, body io.Reader, boundary string, md map[string]string) ([]uploaded, error) {
	if boundary == "" {
		return nil, fmt.Errorf("%w: multipart body without boundary", errBadRequest)
	}
	query := r.URL.Query().Get("path")
	mr := multipart.NewReader(bodyReader{body}, boundary)
	seen := map[string]bool{}
	res := []uploaded{}
	for {
		part, err := mr.NextRawPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, &bodyError{err}
		}
		params := dispositionParams(part.Header.Get("Content-Disposition"))
		if params["name"] != "file" {
			continue
		}
		dest, err := h.partDestination(u, query, params["filename"])
		if err != nil {
			return nil, err
		}
		if seen[dest] {
			return nil, fmt.Errorf("%w: destination '%s' appears more than once", errBadRequest, dest)
		}
		if len(seen) == 0 {
			if err := checkSpace(r, dest); err != nil {
				return nil, err
			}
		}
		seen[dest] = true
		stored, err := h.writeFile(u, dest, part, md)
		if err != nil {
			return nil, err
		}
		res = append(res, result(dest, stored))
	}
	if len(res) == 0 {
		return nil, fmt.Errorf("%w: no multipart part named \"file\"", errBadRequest)
	}
	return res, nil
}

// partDestination is the `path` query when given, else the part's filename.
func (h *Handler) partDestination(u *users.User, query, filename string) (string, error) {
	p := query
	if p == "" {
		p = filename
	}
	if p == "" {
		return "", fmt.Errorf("%w: file part without filename and no path query parameter", errBadRequest)
	}
	return u.Resolve(p, h.settings.Workdir()), nil
}

// checkSpace refuses (ENOSPC) a body whose Content-Length exceeds the free space
// of dest's filesystem, before anything is written. Unknown lengths pass.
func checkSpace(r *http.Request, dest string) error {
	if r.ContentLength <= 0 {
		return nil
	}
	free, err := freeBytes(filepath.Dir(dest))
	if err != nil {
		return nil // the write itself will report the real problem
	}
	if uint64(r.ContentLength) > free {
		return fmt.Errorf("upload of %d bytes to '%s' with %d bytes free: %w", r.ContentLength, dest, free, syscall.ENOSPC)
	}
	return nil
}

// result describes a written file for the response.
func result(dest string, md map[string]string) uploaded {
	u := uploaded{Name: filepath.Base(dest), Path: dest, Type: "file"}
	if len(md) > 0 {
		u.Metadata = md
	}
	return u
}

// uploadError answers an upload failure: full disk or quota → 507, a malformed
// request or unusable destination → 400, anything else → 500.
func (h *Handler) uploadError(w http.ResponseWriter, err error) {
	var be *bodyError
	switch {
	case noSpace(err):
		writeError(w, http.StatusInsufficientStorage, "not enough disk space available: "+err.Error())
	case errors.Is(err, errBadRequest), errors.Is(err, errBadDestination), errors.As(err, &be):
		writeError(w, http.StatusBadRequest, err.Error())
	default:
		h.log.Error("upload failed", "err", err)
		writeError(w, http.StatusInternalServerError, err.Error())
	}
}
