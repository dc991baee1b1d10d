package template

import (
	"embed"
	"errors"
	"io/fs"
	"path"
	"sort"

	"github.com/cubby-dev/cubby/internal/agent/kernels/java"
	"github.com/cubby-dev/cubby/internal/agent/kernels/node"
	"github.com/cubby-dev/cubby/internal/agent/kernels/python"
)

// builtinSources are files a built-in installs that live with the code owning them
// rather than in its directory: the code-interpreter template installs Cubby's
// IPython extension and its Node.js and Java kernel launchers straight from the
// packages that embed and test them.
var builtinSources = map[string]fs.FS{
	"code-interpreter": unionFS{python.Files(), node.Files(), java.Files()},
}

// unionFS resolves a path in each file system in turn.
type unionFS []fs.FS

func (u unionFS) Open(name string) (fs.File, error) {
	var first error
	for _, f := range u {
		file, err := f.Open(name)
		if err == nil {
			return file, nil
		}
		if first == nil || !errors.Is(err, fs.ErrNotExist) {
			first = err
		}
	}
	if first == nil {
		first = &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return nil, first
}

// builtinFS holds the built-in definitions: builtin/<name>/cubby-template.yaml plus
// any files they reference. Adding a built-in is adding such a directory.
//
//go:embed all:builtin
var builtinFS embed.FS

// Builtin returns the embedded definition called name (e.g. "base"), defaults
// applied, and whether it exists. Its file sources resolve inside the embedded
// directory. An embedded definition that fails to parse is a programming error
// caught by the package tests; Builtin reports it as absent.
func Builtin(name string) (Definition, bool) {
	if !nameRe.MatchString(name) {
		return Definition{}, false
	}
	dir, err := fs.Sub(builtinFS, path.Join("builtin", name))
	if err != nil {
		return Definition{}, false
	}
	data, err := fs.ReadFile(dir, DefinitionFile)
	if err != nil {
		return Definition{}, false
	}
	src := dir
	if extra, ok := builtinSources[name]; ok {
		src = unionFS{dir, extra}
	}
	def, err := ParseDefinition(data, src)
	if err != nil || def.Name != name {
		return Definition{}, false
	}
	return def, true
}

// BuiltinNames returns the names of the embedded definitions, sorted.
func BuiltinNames() []string {
	entries, err := builtinFS.ReadDir("builtin")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// BuiltinFor returns the name of the built-in definition whose name or alias
// is alias (e.g. "code-interpreter" for "code-interpreter-v1"), if any.
func BuiltinFor(alias string) (string, bool) {
	for _, n := range BuiltinNames() {
		def, ok := Builtin(n)
		if ok && (def.Name == alias || contains(def.Aliases, alias)) {
			return n, true
		}
	}
	return "", false
}
