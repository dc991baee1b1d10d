package dashboard

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:generate ../../scripts/vendor-web.sh

// web holds the dashboard's templates (web/templates) and static files
// (web/static, including the vendored xterm.js in web/static/vendor).
//
//go:embed web
var web embed.FS

// asset is one static file, ready to serve.
type asset struct {
	body  []byte
	gzip  []byte // body gzipped, nil when that does not pay
	ctype string
	hash  string // first 16 hex digits of the body's SHA-256
}

// assets serves web/static under Prefix/static/ with content-hashed URLs
// (URL) that may be cached for a year, and gzip when the client takes it.
type assets struct {
	files map[string]*asset // by path below web/static
}

func loadAssets() (*assets, error) {
	a := &assets{files: map[string]*asset{}}
	err := fs.WalkDir(web, "web/static", func(p string, e fs.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		body, err := web.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(body)
		f := &asset{body: body, hash: hex.EncodeToString(sum[:8]), ctype: mime.TypeByExtension(path.Ext(p))}
		if f.ctype == "" {
			f.ctype = "application/octet-stream"
		}
		if len(body) > 1024 && !strings.HasPrefix(f.ctype, "image/png") {
			var buf bytes.Buffer
			zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
			_, _ = zw.Write(body)
			_ = zw.Close()
			f.gzip = buf.Bytes()
		}
		a.files[strings.TrimPrefix(p, "web/static/")] = f
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("dashboard assets: %w", err)
	}
	return a, nil
}

// URL returns the content-hashed URL of static file name. It panics for a
// file that does not exist (a broken template, caught by the tests).
func (a *assets) URL(name string) string {
	f, ok := a.files[name]
	if !ok {
		panic("dashboard: no static file " + name)
	}
	return Prefix + "/static/" + name + "?v=" + f.hash
}

func (a *assets) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f, ok := a.files[strings.TrimPrefix(r.URL.Path, Prefix+"/static/")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.ctype)
	h.Set("ETag", `"`+f.hash+`"`)
	h.Set("Vary", "Accept-Encoding")
	if r.URL.Query().Get("v") == f.hash {
		h.Set("Cache-Control", "public, max-age=31536000, immutable")
	} else {
		h.Set("Cache-Control", "no-cache")
	}
	body := f.body
	if f.gzip != nil && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		h.Set("Content-Encoding", "gzip")
		h.Set("ETag", `"`+f.hash+`-gz"`)
		body = f.gzip
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(body))
}
