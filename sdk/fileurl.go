package sdk

import (
	"net/url"
	"strconv"
	"time"

	"github.com/cubby-dev/cubby/internal/filesig"
)

// FileURLOptions configure UploadURL and DownloadURL.
type FileURLOptions struct {
	// User is the sandbox user the URL acts as (default: the sandbox's
	// default user).
	User string
	// Expiration, when positive, makes the signature expire that long from
	// now (whole seconds). It needs a secured sandbox (one with an access
	// token).
	Expiration time.Duration
}

// UploadURL returns a URL that accepts a POST of a file to path (multipart
// part "file" or application/octet-stream) without any header: for a secured
// sandbox the URL carries a v1 signature of the write (docs/wire/envd.md §3.7). It is
// based on the sandbox's direct envd URL (SandboxURL, or
// https://49983-<id>.<domain>). Errors: *InvalidArgumentError when Expiration
// is set on an unsecured sandbox.
func (s *Sandbox) UploadURL(path string, opts *FileURLOptions) (string, error) {
	return s.fileURL(path, filesig.OpWrite, opts)
}

// DownloadURL returns a URL that serves a GET of the file at path without
// any header; see UploadURL for signing and errors.
func (s *Sandbox) DownloadURL(path string, opts *FileURLOptions) (string, error) {
	return s.fileURL(path, filesig.OpRead, opts)
}

func (s *Sandbox) fileURL(path, op string, opts *FileURLOptions) (string, error) {
	var o FileURLOptions
	if opts != nil {
		o = *opts
	}
	if o.Expiration > 0 && s.accessToken == "" {
		return "", &InvalidArgumentError{Message: "signature expiration needs a secured sandbox (one with an access token)"}
	}
	base, err := url.Parse(s.cfg.directURL(s.id, s.domain, EnvdPort))
	if err != nil {
		return "", &InvalidArgumentError{Message: "sandbox URL: " + err.Error()}
	}
	// /files resolves from the root, like the SDKs (docs/wire/e2b-api.md §1.2).
	base.Path, base.RawPath = "/files", ""
	q := url.Values{"path": {path}}
	user := s.queryUser(o.User)
	if user != "" {
		q.Set("username", user)
	}
	if s.accessToken != "" {
		var exp int64
		if o.Expiration > 0 {
			exp = time.Now().Add(o.Expiration).Unix()
			q.Set("signature_expiration", strconv.FormatInt(exp, 10))
		}
		q.Set("signature", filesig.Sign(path, op, user, s.accessToken, exp))
	}
	base.RawQuery = q.Encode()
	return base.String(), nil
}
