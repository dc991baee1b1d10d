package sdk

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/envdpb/filesystem"
)

// FileType is the type of a filesystem entry.
type FileType string

// File types (docs/wire/envd.md §3.2 FileType).
const (
	FileTypeFile    FileType = "file"
	FileTypeDir     FileType = "dir"
	FileTypeSymlink FileType = "symlink"
)

// WriteInfo describes a written file (the /files upload response, docs/wire/envd.md §3.4).
type WriteInfo struct {
	Name string
	Type FileType
	// Path is the absolute path in the sandbox.
	Path string
	// Metadata is the file's user metadata (user.e2b.* xattrs), nil if none.
	Metadata map[string]string
}

// EntryInfo describes a filesystem entry (EntryInfo, docs/wire/envd.md §3.2).
type EntryInfo struct {
	Name string
	Type FileType
	// Path is the absolute path in the sandbox.
	Path string
	// Size is in bytes.
	Size int64
	// Mode holds the mode and permission bits as envd reports them.
	Mode uint32
	// Permissions is the mode as text, e.g. "-rw-r--r--".
	Permissions string
	Owner       string
	Group       string
	// ModifiedTime is the last modification time (zero when unknown).
	ModifiedTime time.Time
	// SymlinkTarget is the resolved target of a symlink, "" otherwise.
	SymlinkTarget string
	// Metadata is the file's user metadata (user.e2b.* xattrs), nil if none.
	Metadata map[string]string
}

// FileOptions are per-call options of filesystem operations.
type FileOptions struct {
	// User runs the operation as this sandbox user: relative paths resolve
	// against their home and created entries are theirs. Default: the
	// sandbox's default user.
	User string
}

// WriteOptions configure Write, WriteReader and WriteFiles.
type WriteOptions struct {
	// User writes as this sandbox user (see FileOptions.User).
	User string
	// Metadata is stored on every written file as user metadata (envd 0.6.2+);
	// keys are lowercased by the sandbox. Nil clears existing metadata.
	Metadata map[string]string
}

// ListDirOptions configure Filesystem.List.
type ListDirOptions struct {
	// User lists as this sandbox user (see FileOptions.User).
	User string
	// Depth is how many levels to descend; 0 means 1 (only direct children).
	Depth int
}

// WriteEntry is one file of WriteFiles: Reader, when set, is streamed;
// otherwise Data is written.
type WriteEntry struct {
	Path   string
	Data   []byte
	Reader io.Reader
}

// Filesystem reads and changes the sandbox's files through envd's
// filesystem RPCs and its /files endpoint (docs/wire/envd.md §3.3, §3.4).
type Filesystem struct {
	s *Sandbox
}

func (o *FileOptions) user() string {
	if o == nil {
		return ""
	}
	return o.User
}

// Read returns the content of a file (GET /files). Errors: *NotFoundError
// (ErrNotFound) for a missing file, *InvalidArgumentError for a directory,
// *AuthenticationError, *TimeoutError (ErrSandboxKilled when the sandbox is
// gone), *ConnectionError.
func (f *Filesystem) Read(ctx context.Context, path string, opts *FileOptions) ([]byte, error) {
	rc, err := f.ReadStream(ctx, path, opts)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, f.s.streamError(ctx, "read "+path, err)
	}
	return b, nil
}

// ReadString is Read returning the content as a string.
func (f *Filesystem) ReadString(ctx context.Context, path string, opts *FileOptions) (string, error) {
	b, err := f.Read(ctx, path, opts)
	return string(b), err
}

// ReadStream opens a file for streaming (GET /files). The request timeout
// bounds only the response headers; ctx bounds the whole read. The caller
// must Close the reader. Errors: those of Read.
func (f *Filesystem) ReadStream(ctx context.Context, path string, opts *FileOptions) (io.ReadCloser, error) {
	q := url.Values{"path": {path}}
	if u := f.s.queryUser(opts.user()); u != "" {
		q.Set("username", u)
	}
	resp, cancel, err := f.s.filesRequest(ctx, http.MethodGet, q, nil, "", target{ResourceFile, path})
	if err != nil {
		return nil, err
	}
	return &cancelOnClose{ReadCloser: resp.Body, cancel: cancel}, nil
}

// Write writes data to a file, creating parent directories and replacing an
// existing file (multipart POST /files). Errors: *InvalidArgumentError,
// *AuthenticationError, ErrNotEnoughSpace, *TimeoutError, *ConnectionError.
func (f *Filesystem) Write(ctx context.Context, path string, data []byte, opts *WriteOptions) (*WriteInfo, error) {
	infos, err := f.WriteFiles(ctx, []WriteEntry{{Path: path, Data: data}}, opts)
	if err != nil {
		return nil, err
	}
	return &infos[0], nil
}

// WriteReader streams r into a file without buffering it (an
// application/octet-stream POST /files on envd 0.5.7+, else multipart). If r
// is an io.ReadCloser it is closed. Errors: those of Write.
func (f *Filesystem) WriteReader(ctx context.Context, path string, r io.Reader, opts *WriteOptions) (*WriteInfo, error) {
	if !versionAtLeast(f.s.envdVersion, "0.5.7") {
		infos, err := f.WriteFiles(ctx, []WriteEntry{{Path: path, Reader: r}}, opts)
		if err != nil {
			return nil, err
		}
		return &infos[0], nil
	}
	q := f.writeQuery(opts)
	q.Set("path", path)
	infos, err := f.upload(ctx, q, r, "application/octet-stream", opts, path)
	if err != nil {
		return nil, err
	}
	return &infos[0], nil
}

// WriteFiles writes several files in one multipart request; each part's
// file name is its destination path (docs/wire/envd.md §3.4). It returns one WriteInfo
// per file. Errors: those of Write.
func (f *Filesystem) WriteFiles(ctx context.Context, files []WriteEntry, opts *WriteOptions) ([]WriteInfo, error) {
	if len(files) == 0 {
		return nil, nil
	}
	body, ctype := multipartBody(files)
	infos, err := f.upload(ctx, f.writeQuery(opts), body, ctype, opts, files[0].Path)
	if err != nil {
		return nil, err
	}
	if len(infos) != len(files) {
		return nil, &APIError{Message: fmt.Sprintf("upload: the sandbox reported %d files for %d written", len(infos), len(files))}
	}
	return infos, nil
}

func (f *Filesystem) writeQuery(opts *WriteOptions) url.Values {
	q := url.Values{}
	var user string
	if opts != nil {
		user = opts.User
	}
	if u := f.s.queryUser(user); u != "" {
		q.Set("username", u)
	}
	return q
}

// multipartBody streams files as multipart/form-data parts named "file".
// The writer goroutine ends when the body is fully read or closed (the HTTP
// client always closes request bodies).
func multipartBody(files []WriteEntry) (io.ReadCloser, string) {
	pr, pw := io.Pipe()
	mw := multipart.NewWriter(pw)
	go func() {
		for _, e := range files {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", fmt.Sprintf(`form-data; name="file"; filename=%q`, e.Path))
			h.Set("Content-Type", "application/octet-stream")
			part, err := mw.CreatePart(h)
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			src := e.Reader
			if src == nil {
				src = bytes.NewReader(e.Data)
			}
			if _, err := io.Copy(part, src); err != nil {
				pw.CloseWithError(err)
				return
			}
		}
		pw.CloseWithError(mw.Close())
	}()
	return pr, mw.FormDataContentType()
}

// upload POSTs a body to /files and decodes the written-files array.
func (f *Filesystem) upload(ctx context.Context, q url.Values, body io.Reader, ctype string, opts *WriteOptions, path string) ([]WriteInfo, error) {
	var md map[string]string
	if opts != nil {
		md = opts.Metadata
	}
	resp, cancel, err := f.s.filesRequest(ctx, http.MethodPost, q, body, ctype, target{ResourceFile, path}, metadataHeaders(md)...)
	if err != nil {
		return nil, err
	}
	defer cancel()
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, f.s.streamError(ctx, "upload "+path, err)
	}
	var out []struct {
		Name     string            `json:"name"`
		Type     string            `json:"type"`
		Path     string            `json:"path"`
		Metadata map[string]string `json:"metadata"`
	}
	if err := decodeBody("upload "+path, raw, &out); err != nil {
		return nil, err
	}
	infos := make([]WriteInfo, len(out))
	for i, w := range out {
		infos[i] = WriteInfo{Name: w.Name, Type: restFileType(w.Type), Path: w.Path, Metadata: w.Metadata}
	}
	return infos, nil
}

// metadataHeaders turns file metadata into X-Metadata-<key> headers.
func metadataHeaders(md map[string]string) []string {
	var kv []string
	for k, v := range md {
		kv = append(kv, "X-Metadata-"+k, v)
	}
	return kv
}

func restFileType(t string) FileType {
	switch t {
	case "directory", "dir":
		return FileTypeDir
	case "symlink":
		return FileTypeSymlink
	}
	return FileType(t)
}

// List lists a directory, depth levels deep, in envd's walk order (ListDir).
// Errors: *NotFoundError for a missing directory, *InvalidArgumentError for a
// non-directory or a negative depth, and the envd errors of Read.
func (f *Filesystem) List(ctx context.Context, path string, opts *ListDirOptions) ([]EntryInfo, error) {
	var o ListDirOptions
	if opts != nil {
		o = *opts
	}
	if o.Depth < 0 {
		return nil, &InvalidArgumentError{Message: "List: depth must be at least 1"}
	}
	res, err := unary(ctx, f.s, "list "+path, o.User, target{ResourceFile, path}, f.s.fsys.ListDir,
		&filesystem.ListDirRequest{Path: path, Depth: uint32(max(o.Depth, 1))})
	if err != nil {
		return nil, err
	}
	out := make([]EntryInfo, len(res.GetEntries()))
	for i, e := range res.GetEntries() {
		out[i] = entryFromProto(e)
	}
	return out, nil
}

// Exists reports whether a file or directory exists (Stat; not_found means
// false). Errors: the envd errors of Read other than not found.
func (f *Filesystem) Exists(ctx context.Context, path string, opts *FileOptions) (bool, error) {
	_, err := f.GetInfo(ctx, path, opts)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, ErrNotFound) {
		return false, nil
	}
	return false, err
}

// GetInfo describes a file or directory (Stat). Errors: *NotFoundError and
// the envd errors of Read.
func (f *Filesystem) GetInfo(ctx context.Context, path string, opts *FileOptions) (*EntryInfo, error) {
	res, err := unary(ctx, f.s, "stat "+path, opts.user(), target{ResourceFile, path}, f.s.fsys.Stat,
		&filesystem.StatRequest{Path: path})
	if err != nil {
		return nil, err
	}
	e := entryFromProto(res.GetEntry())
	return &e, nil
}

// Remove removes a file or a directory tree; a missing path is not an error
// (docs/wire/envd.md §3.3). Errors: the envd errors of Read.
func (f *Filesystem) Remove(ctx context.Context, path string, opts *FileOptions) error {
	_, err := unary(ctx, f.s, "remove "+path, opts.user(), target{ResourceFile, path}, f.s.fsys.Remove,
		&filesystem.RemoveRequest{Path: path})
	return err
}

// Rename moves oldPath to newPath and describes the destination (Move).
// Errors: *NotFoundError for a missing source and the envd errors of Read.
func (f *Filesystem) Rename(ctx context.Context, oldPath, newPath string, opts *FileOptions) (*EntryInfo, error) {
	res, err := unary(ctx, f.s, "rename "+oldPath, opts.user(), target{ResourceFile, oldPath}, f.s.fsys.Move,
		&filesystem.MoveRequest{Source: oldPath, Destination: newPath})
	if err != nil {
		return nil, err
	}
	e := entryFromProto(res.GetEntry())
	return &e, nil
}

// MakeDir creates a directory and its parents. It returns false when the
// directory already existed (already_exists). Errors: *InvalidArgumentError
// when the path exists but is not a directory, and the envd errors of Read.
func (f *Filesystem) MakeDir(ctx context.Context, path string, opts *FileOptions) (bool, error) {
	_, err := unary(ctx, f.s, "make directory "+path, opts.user(), target{ResourceFile, path}, f.s.fsys.MakeDir,
		&filesystem.MakeDirRequest{Path: path})
	if err == nil {
		return true, nil
	}
	if ae := (*APIError)(nil); errors.As(err, &ae) && ae.Code == "already_exists" {
		return false, nil
	}
	return false, err
}

func entryFromProto(e *filesystem.EntryInfo) EntryInfo {
	out := EntryInfo{
		Name: e.GetName(), Type: protoFileType(e.GetType()), Path: e.GetPath(), Size: e.GetSize(),
		Mode: e.GetMode(), Permissions: e.GetPermissions(), Owner: e.GetOwner(), Group: e.GetGroup(),
		SymlinkTarget: e.GetSymlinkTarget(), Metadata: e.GetMetadata(),
	}
	if t := e.GetModifiedTime(); t != nil {
		out.ModifiedTime = t.AsTime()
	}
	return out
}

func protoFileType(t filesystem.FileType) FileType {
	switch t {
	case filesystem.FileType_FILE_TYPE_FILE:
		return FileTypeFile
	case filesystem.FileType_FILE_TYPE_DIRECTORY:
		return FileTypeDir
	case filesystem.FileType_FILE_TYPE_SYMLINK:
		return FileTypeSymlink
	}
	return ""
}

// filesRequest sends a /files request; the request timeout bounds the time to
// response headers only. On success the caller owns resp.Body and must call
// the returned cancel after closing it. headerKV are extra header pairs.
func (s *Sandbox) filesRequest(ctx context.Context, method string, q url.Values, body io.Reader, ctype string, t target, headerKV ...string) (*http.Response, context.CancelFunc, error) {
	op := strings.ToLower(method) + " /files " + t.id
	rctx, cancel := context.WithCancelCause(ctx)
	var stop func() bool = func() bool { return true }
	if s.cfg.requestTimeout > 0 {
		timer := time.AfterFunc(s.cfg.requestTimeout, func() { cancel(errRequestTimeout) })
		stop = timer.Stop
	}
	u := s.cfg.envdURL(s.id, s.domain) + "/files?" + q.Encode()
	req, err := http.NewRequestWithContext(rctx, method, u, body)
	if err != nil {
		stop()
		cancel(nil)
		if c, ok := body.(io.Closer); ok {
			c.Close()
		}
		return nil, nil, &InvalidArgumentError{Message: err.Error()}
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	for i := 0; i+1 < len(headerKV); i += 2 {
		req.Header.Set(headerKV[i], headerKV[i+1])
	}
	resp, err := s.envdHTTP.Do(req)
	stop()
	if err != nil {
		cancel(nil)
		return nil, nil, s.transportFailure(ctx, rctx, op, err)
	}
	if resp.StatusCode/100 != 2 {
		defer cancel(nil)
		defer resp.Body.Close()
		raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, nil, s.filesError(ctx, op, t, resp, raw)
	}
	return resp, func() { cancel(nil) }, nil
}

// filesError maps a /files error status (docs/wire/envd.md §3.4).
func (s *Sandbox) filesError(ctx context.Context, op string, t target, resp *http.Response, raw []byte) error {
	msg := errorMessage(raw)
	switch resp.StatusCode {
	case http.StatusBadRequest:
		return &InvalidArgumentError{Message: op + ": " + msg}
	case http.StatusUnauthorized, http.StatusForbidden:
		return &AuthenticationError{Message: op + ": " + msg + "; check the user name and the sandbox's access token"}
	case http.StatusNotFound:
		return &NotFoundError{Resource: t.resource, ID: t.id, Message: msg}
	case http.StatusTooManyRequests:
		return &RateLimitError{Message: op + ": " + msg, RetryAfter: retryAfter(resp.Header)}
	case http.StatusBadGateway:
		if s.probeKilled(ctx) {
			return killedError(s.id)
		}
		return &TimeoutError{Message: op + ": sandbox unreachable (" + msg + "), likely due to the sandbox timeout"}
	case http.StatusInsufficientStorage:
		return fmt.Errorf("%s: %s: %w", op, msg, ErrNotEnoughSpace)
	}
	return &APIError{StatusCode: resp.StatusCode, Message: op + ": " + msg}
}

// streamError maps an error met while reading a response body.
func (s *Sandbox) streamError(ctx context.Context, op string, err error) error {
	return s.transportFailure(ctx, ctx, op, err)
}

// transportFailure maps a failed HTTP exchange with the sandbox: the caller's
// context, the request timeout, a killed sandbox (docs/wire/envd.md §3.5) or an
// unreachable server.
func (s *Sandbox) transportFailure(ctx, rctx context.Context, op string, err error) error {
	if ctx.Err() != nil {
		return ctxError(op, ctx.Err())
	}
	if errors.Is(context.Cause(rctx), errRequestTimeout) {
		return &TimeoutError{
			Message: fmt.Sprintf("%s: no response within %s; raise ConnectionOptions.RequestTimeout", op, s.cfg.requestTimeout),
			Err:     context.DeadlineExceeded,
		}
	}
	if rctx.Err() != nil {
		// Our own cancellation (e.g. an execution timeout); the caller maps the cause.
		return fmt.Errorf("%s: %w", op, context.Cause(rctx))
	}
	if s.probeKilled(ctx) {
		return killedError(s.id)
	}
	return &ConnectionError{URL: s.cfg.envdURL(s.id, s.domain), Err: err}
}

// cancelOnClose releases the request context when the body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

// Close closes the body and releases the request context.
func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}
