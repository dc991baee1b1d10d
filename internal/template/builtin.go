package template

import (
	"embed"
	"io/fs"
	"path"
	"sort"
)

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
	def, err := ParseDefinition(data, dir)
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
