package mcpserver

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cubby-dev/cubby/sdk"
)

// Limits of file_list.
const (
	maxListEntries = 1000
	maxListDepth   = 5
)

type fileReadArgs struct {
	Path string `json:"path" jsonschema:"File path in the sandbox; relative paths start at the user's home."`
	sandboxArg
	MaxBytes int `json:"max_bytes,omitempty" jsonschema:"Read at most this many bytes (default and maximum: the server's read limit, 1 MiB unless configured)."`
}

type fileReadResult struct {
	Sandbox   string `json:"sandbox"`
	Path      string `json:"path"`
	Size      int64  `json:"size" jsonschema:"Size of the file in bytes."`
	Truncated bool   `json:"truncated" jsonschema:"Only the first max_bytes were returned."`
	Encoding  string `json:"encoding" jsonschema:"utf-8: the text is in text; binary: the bytes are in the resource content (base64 blob)."`
	MIMEType  string `json:"mime_type"`
	Text      string `json:"text,omitempty"`
}

type fileWriteArgs struct {
	Path     string `json:"path" jsonschema:"File path in the sandbox; missing parent directories are created."`
	Content  string `json:"content" jsonschema:"The file's new content."`
	Encoding string `json:"encoding,omitempty" jsonschema:"utf-8 (default) or base64 (content is base64-encoded bytes)."`
	sandboxArg
}

type fileWriteResult struct {
	Sandbox string `json:"sandbox"`
	Path    string `json:"path" jsonschema:"Absolute path written."`
	Size    int    `json:"size" jsonschema:"Bytes written."`
}

type fileListArgs struct {
	Path  string `json:"path,omitempty" jsonschema:"Directory to list; default the user's home."`
	Depth int    `json:"depth,omitempty" jsonschema:"How deep to descend (default 1: the directory's entries; at most 5)."`
	sandboxArg
}

type fileEntry struct {
	Name     string    `json:"name"`
	Path     string    `json:"path"`
	Type     string    `json:"type" jsonschema:"file or dir"`
	Size     int64     `json:"size"`
	Modified time.Time `json:"modified"`
}

type fileListResult struct {
	Sandbox   string      `json:"sandbox"`
	Path      string      `json:"path"`
	Entries   []fileEntry `json:"entries"`
	Truncated bool        `json:"truncated" jsonschema:"More than 1000 entries: only the first ones are listed."`
}

func (t *tools) registerFiles(srv *mcp.Server) {
	mcp.AddTool(srv, &mcp.Tool{
		Name:  "file_read",
		Title: "Read a file",
		Description: "Read a file from a sandbox. UTF-8 text is returned as text; other bytes as a base64 resource blob " +
			"(and images also as image content). Large files are cut at max_bytes with truncated=true.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.fileRead)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "file_write",
		Title:       "Write a file",
		Description: "Create or overwrite a file in a sandbox with text or base64-encoded bytes.",
	}, t.fileWrite)
	mcp.AddTool(srv, &mcp.Tool{
		Name:        "file_list",
		Title:       "List a directory",
		Description: "List the entries of a directory in a sandbox (name, path, type, size, modification time).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
	}, t.fileList)
}

func (t *tools) fileRead(ctx context.Context, req *mcp.CallToolRequest, in fileReadArgs) (*mcp.CallToolResult, fileReadResult, error) {
	limit, err := orWithin("max_bytes", in.MaxBytes, t.svc.cfg.ReadLimit, 1, t.svc.cfg.ReadLimit)
	if err != nil {
		return nil, fileReadResult{}, err
	}
	st, sb, _, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, fileReadResult{}, err
	}
	info, err := sb.Files.GetInfo(ctx, in.Path, nil)
	if err != nil {
		return nil, fileReadResult{}, st.fail("file_read", sb.ID(), err)
	}
	if info.Type == sdk.FileTypeDir {
		return nil, fileReadResult{}, fmt.Errorf("file_read: %s is a directory (use file_list)", info.Path)
	}
	rc, err := sb.Files.ReadStream(ctx, info.Path, nil)
	if err != nil {
		return nil, fileReadResult{}, st.fail("file_read", sb.ID(), err)
	}
	defer rc.Close()
	data, err := io.ReadAll(io.LimitReader(rc, int64(limit)+1))
	if err != nil {
		return nil, fileReadResult{}, st.fail("file_read", sb.ID(), err)
	}
	out := fileReadResult{Sandbox: sb.ID(), Path: info.Path, Size: info.Size, Truncated: len(data) > limit}
	if out.Truncated {
		data = data[:limit]
	}
	return fileContent(&out, data), out, nil
}

// fileContent fills the encoding of out and returns the content carrying data.
func fileContent(out *fileReadResult, data []byte) *mcp.CallToolResult {
	out.MIMEType = http.DetectContentType(data)
	text := data
	if out.Truncated { // a rune cut at the limit does not make the file binary
		text = data[:len(data)-incompleteRune(data)]
	}
	if utf8.Valid(text) && !strings.ContainsRune(string(text), 0) {
		out.Encoding, out.Text = "utf-8", string(text)
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: out.Text}}}
	}
	out.Encoding = "binary"
	res := &mcp.EmbeddedResource{Resource: &mcp.ResourceContents{
		URI: "sandbox://" + out.Sandbox + out.Path, MIMEType: out.MIMEType, Blob: data}}
	content := []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("%s: %d bytes of %s (binary, attached as a resource)", out.Path, len(data), out.MIMEType)}, res}
	if !out.Truncated && (out.MIMEType == "image/png" || out.MIMEType == "image/jpeg" || out.MIMEType == "image/gif") {
		content = append(content, &mcp.ImageContent{Data: data, MIMEType: out.MIMEType})
	}
	return &mcp.CallToolResult{Content: content}
}

// incompleteRune is the length of a trailing partial UTF-8 sequence of b.
func incompleteRune(b []byte) int {
	for n := 1; n <= 3 && n <= len(b); n++ {
		if utf8.RuneStart(b[len(b)-n]) {
			if utf8.FullRune(b[len(b)-n:]) {
				return 0
			}
			return n
		}
	}
	return 0
}

func (t *tools) fileWrite(ctx context.Context, req *mcp.CallToolRequest, in fileWriteArgs) (*mcp.CallToolResult, fileWriteResult, error) {
	var data []byte
	switch in.Encoding {
	case "", "utf-8", "utf8", "text":
		data = []byte(in.Content)
	case "base64":
		b, err := base64.StdEncoding.DecodeString(in.Content)
		if err != nil {
			return nil, fileWriteResult{}, fmt.Errorf("content is not valid base64: %v", err)
		}
		data = b
	default:
		return nil, fileWriteResult{}, fmt.Errorf("encoding %q: want utf-8 or base64", in.Encoding)
	}
	if in.Path == "" {
		return nil, fileWriteResult{}, errors.New("path is required")
	}
	st, sb, _, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, fileWriteResult{}, err
	}
	w, err := sb.Files.Write(ctx, in.Path, data, nil)
	if err != nil {
		return nil, fileWriteResult{}, st.fail("file_write", sb.ID(), err)
	}
	return nil, fileWriteResult{Sandbox: sb.ID(), Path: w.Path, Size: len(data)}, nil
}

func (t *tools) fileList(ctx context.Context, req *mcp.CallToolRequest, in fileListArgs) (*mcp.CallToolResult, fileListResult, error) {
	depth, err := orWithin("depth", in.Depth, 1, 1, maxListDepth)
	if err != nil {
		return nil, fileListResult{}, err
	}
	st, sb, _, err := t.target(ctx, req, in.Sandbox)
	if err != nil {
		return nil, fileListResult{}, err
	}
	path := in.Path
	if path == "" {
		path = "."
	}
	entries, err := sb.Files.List(ctx, path, &sdk.ListDirOptions{Depth: depth})
	if err != nil {
		return nil, fileListResult{}, st.fail("file_list", sb.ID(), err)
	}
	out := fileListResult{Sandbox: sb.ID(), Path: path, Entries: []fileEntry{}}
	for i, e := range entries {
		if i == maxListEntries {
			out.Truncated = true
			break
		}
		out.Entries = append(out.Entries, fileEntry{Name: e.Name, Path: e.Path, Type: string(e.Type), Size: e.Size, Modified: e.ModifiedTime})
	}
	return nil, out, nil
}
