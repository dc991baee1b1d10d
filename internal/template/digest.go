package template

import (
	"crypto/sha256"
	"encoding/base32"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"strings"
)

// recipeVersion names the build recipe (hook script, implicit packages, the
// file capabilities removed after the build). It is part of every digest, so
// changing how trees are built invalidates cached trees. v2: capabilities the
// sandboxes cannot grant are removed (dropUngrantableCaps).
const recipeVersion = "cubby-template/v2"

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

// digestInput is the canonical form hashed into a digest.
type digestInput struct {
	Recipe   string            `json:"recipe"`
	Name     string            `json:"name"`
	Aliases  []string          `json:"aliases"`
	Suite    string            `json:"suite"`
	Variant  string            `json:"variant"`
	Includes []string          `json:"includes"`
	Pip      []string          `json:"pip"`
	Npm      []string          `json:"npm"`
	Files    []resolvedFile    `json:"files"`
	Run      []string          `json:"run"`
	Env      map[string]string `json:"env"`
	User     string            `json:"user"`
	Workdir  string            `json:"workdir"`
}

// Digest returns the 32-hex-character content digest of the definition: a sha256
// over its canonical JSON (defaults applied, packages sorted, file contents hashed)
// and the build recipe version. Equal digests mean equal build inputs. Errors come
// from validation or from reading file sources.
func (d Definition) Digest() (string, error) {
	d = d.withDefaults()
	if err := d.Validate(); err != nil {
		return "", err
	}
	files, err := d.resolveFiles()
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", d.Name, err)
	}
	return digestOf(d, files)
}

func digestOf(d Definition, files []resolvedFile) (string, error) {
	in := digestInput{
		Recipe: recipeVersion, Name: d.Name, Aliases: nonNil(d.Aliases), Suite: d.Suite,
		Variant: d.Variant, Includes: d.Includes(), Pip: nonNil(d.Pip), Npm: nonNil(d.Npm),
		Files: nonNil(files), Run: nonNil(d.Run), Env: d.Env, User: d.User, Workdir: d.Workdir,
	}
	if in.Env == nil {
		in.Env = map[string]string{}
	}
	b, err := json.Marshal(in)
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", d.Name, err)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}

// nonNil makes nil and empty slices hash alike.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}
