package template

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// IDLength is the length of a template ID.
const IDLength = 20

// IDFor returns the template ID of a template name: 20 characters of [a-z2-7]
// (lowercase base32 of sha256("cubby-template-id:" + name)). The same name always
// gives the same ID, on every host.
func IDFor(name string) string {
	sum := sha256.Sum256([]byte("cubby-template-id:" + name))
	enc := base32.StdEncoding.WithPadding(base32.NoPadding).EncodeToString(sum[:])
	return strings.ToLower(enc[:IDLength])
}

// resolvedFile is a File with its content and effective mode resolved.
type resolvedFile struct {
	Dest    string `json:"dest"`
	Mode    uint32 `json:"mode"`
	Owner   string `json:"owner"` // "" = default rule applied at build time
	SHA256  string `json:"sha256"`
	content []byte
}

// resolveFiles reads every file of d (sorted by destination) and fixes its mode.
func (d Definition) resolveFiles() ([]resolvedFile, error) {
	var out []resolvedFile
	for _, dest := range sortedKeys(d.Files) {
		f := d.Files[dest]
		rf := resolvedFile{Dest: dest, Mode: uint32(f.Mode), Owner: f.Owner}
		if f.Content != nil {
			rf.content = []byte(*f.Content)
			if rf.Mode == 0 {
				rf.Mode = 0o644
			}
		} else {
			data, mode, err := readSource(d.src, f.Source)
			if err != nil {
				return nil, fmt.Errorf("files[%q]: %w", dest, err)
			}
			rf.content = data
			if rf.Mode == 0 {
				rf.Mode = 0o644
				if mode&0o111 != 0 {
					rf.Mode = 0o755
				}
			}
		}
		sum := sha256.Sum256(rf.content)
		rf.SHA256 = hex.EncodeToString(sum[:])
		out = append(out, rf)
	}
	return out, nil
}

func readSource(src fs.FS, name string) ([]byte, fs.FileMode, error) {
	if src == nil {
		return nil, 0, fmt.Errorf("source %q: definition has no source directory", name)
	}
	f, err := src.Open(name)
	if err != nil {
		return nil, 0, fmt.Errorf("source: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, 0, fmt.Errorf("source: %w", err)
	}
	data, err := io.ReadAll(f)
	if err != nil {
		return nil, 0, fmt.Errorf("read source %s: %w", name, err)
	}
	return data, st.Mode(), nil
}
