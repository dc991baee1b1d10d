// Package template builds and stores sandbox templates: immutable Debian root
// filesystem trees (built with mmdebstrap) that a sandbox's overlay mounts as its
// read-only lower layer, plus the metadata the control plane needs (default user,
// workdir and environment; docs/wire/envd.md §3.6).
package template

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/cubby-dev/cubby/internal/agentapi"
)

// DefinitionFile is the file name LoadDefinition reads from a definition directory.
const DefinitionFile = "cubby-template.yaml"

// Defaults applied to a definition's empty fields.
const (
	DefaultSuite   = "bookworm"
	DefaultVariant = "minbase"
	DefaultUser    = agentapi.DefaultUser // the sandbox's default user (docs/wire/envd.md §3.6)
	DefaultUID     = 1000                 // uid (and gid) of DefaultUser in every template
)

// Runtimes are the values Definition.Runtime accepts besides "" (the OCI
// runtimes the server knows: runc, and gVisor's runsc).
var Runtimes = []string{"runc", "runsc"}

// ErrInvalidDefinition is wrapped by every validation error of a definition.
var ErrInvalidDefinition = errors.New("invalid template definition")

// Definition is a parsed cubby-template.yaml. The zero values of Suite, Variant,
// User and Workdir mean the defaults (bookworm, minbase, "user", the user's home).
type Definition struct {
	Name     string            `json:"name"`              // primary alias, [a-z0-9][a-z0-9_-]{0,62}
	Aliases  []string          `json:"aliases,omitempty"` // further aliases, same syntax
	Suite    string            `json:"suite,omitempty"`   // Debian suite for mmdebstrap
	Variant  string            `json:"variant,omitempty"` // mmdebstrap --variant
	Packages []string          `json:"packages,omitempty"`
	Pip      []string          `json:"pip,omitempty"` // pip requirement specifiers
	Npm      []string          `json:"npm,omitempty"` // global npm packages (needs nodejs)
	Files    map[string]File   `json:"files,omitempty"`
	Run      []string          `json:"run,omitempty"` // bash -e scripts run as root in the chroot (cwd /), in order, with Env set
	Env      map[string]string `json:"env,omitempty"` // baked into /etc/environment
	User     string            `json:"user,omitempty"`
	Workdir  string            `json:"workdir,omitempty"`
	// Runtime is the OCI runtime sandboxes of this template run under: "runc",
	// "runsc" (gVisor) or "" for the server's default. It is not a build input
	// (not part of Digest): changing it never rebuilds the tree.
	Runtime string `json:"runtime,omitempty"`

	src fs.FS // where File.Source paths are read from; nil = no sources
}

// File is one entry of a definition's files map (key = absolute destination path
// in the rootfs). In YAML it is either a plain string (the source path relative to
// the definition directory) or an object with exactly one of source/content.
type File struct {
	Source  string  `json:"source,omitempty"`  // path relative to the definition dir
	Content *string `json:"content,omitempty"` // inline content
	// Mode is the permission bits; 0 = 0755 if the source has an exec bit, else 0644.
	Mode FileMode `json:"mode,omitempty"`
	// Owner is "root", "user" or the definition's user; "" = the user whose home
	// contains the destination, else root.
	Owner string `json:"owner,omitempty"`
}

// FileMode is a permission mode that accepts a YAML number (0755, already octal
// in YAML 1.1) or a string of octal digits ("0755").
type FileMode uint32

// UnmarshalJSON implements json.Unmarshaler for numbers and octal strings.
func (m *FileMode) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := strconv.ParseUint(s, 8, 32)
		if err != nil {
			return fmt.Errorf("mode %q: not an octal number", s)
		}
		*m = FileMode(v)
		return nil
	}
	var n uint32
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("mode %s: want an octal string or a number", b)
	}
	*m = FileMode(n)
	return nil
}

// MarshalJSON writes the mode as an octal string.
func (m FileMode) MarshalJSON() ([]byte, error) {
	return json.Marshal(fmt.Sprintf("%04o", uint32(m)))
}

// UnmarshalJSON implements json.Unmarshaler for the string and object forms.
func (f *File) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		*f = File{Source: s}
		return nil
	}
	type plain File
	var p plain
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return err
	}
	*f = File(p)
	return nil
}

// LoadDefinition reads dir/cubby-template.yaml, applies defaults and validates it;
// file sources resolve relative to dir. Errors wrap fs errors or ErrInvalidDefinition
// (with every problem found, one per line, prefixed by its field path).
func LoadDefinition(dir string) (Definition, error) {
	data, err := os.ReadFile(filepath.Join(dir, DefinitionFile))
	if err != nil {
		return Definition{}, fmt.Errorf("load template definition: %w", err)
	}
	def, err := ParseDefinition(data, os.DirFS(dir))
	if err != nil {
		return Definition{}, fmt.Errorf("%s: %w", filepath.Join(dir, DefinitionFile), err)
	}
	return def, nil
}

// ParseDefinition parses cubby-template.yaml content (unknown fields are errors),
// applies defaults and validates it. src resolves File.Source paths; it may be nil
// when no file uses a source. Errors wrap ErrInvalidDefinition.
func ParseDefinition(data []byte, src fs.FS) (Definition, error) {
	var def Definition
	if err := yaml.UnmarshalStrict(data, &def); err != nil {
		return Definition{}, fmt.Errorf("%w: %w", ErrInvalidDefinition, err)
	}
	def.src = src
	def = def.withDefaults()
	if err := def.Validate(); err != nil {
		return Definition{}, err
	}
	return def, nil
}

// WithSource returns a copy of d whose File.Source paths resolve in src.
func (d Definition) WithSource(src fs.FS) Definition {
	d.src = src
	return d
}

// withDefaults fills the empty optional fields.
func (d Definition) withDefaults() Definition {
	if d.Suite == "" {
		d.Suite = DefaultSuite
	}
	if d.Variant == "" {
		d.Variant = DefaultVariant
	}
	if d.User == "" {
		d.User = DefaultUser
	}
	if d.Workdir == "" {
		d.Workdir = homeOf(d.User)
	}
	return d
}

// homeOf is the home directory the build gives user name.
func homeOf(name string) string {
	if name == "root" {
		return "/root"
	}
	return "/home/" + name
}

var (
	nameRe    = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,62}$`)
	suiteRe   = regexp.MustCompile(`^[a-z][a-z0-9.-]{0,63}$`)
	pkgRe     = regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+([=/][A-Za-z0-9.+~:_-]+)?$`)
	userRe    = regexp.MustCompile(`^[a-z_][a-z0-9_-]{0,31}$`)
	envKeyRe  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	variants  = []string{"essential", "apt", "required", "minbase", "buildd", "important", "debootstrap", "standard"}
	npmNameRe = regexp.MustCompile(`^(@[a-z0-9][a-z0-9._~-]*/)?[a-z0-9][a-z0-9._~-]*(@[^\s@]+)?$`)
)

// ValidName reports whether s can name a template: [a-z0-9][a-z0-9_-]{0,62}.
func ValidName(s string) bool { return nameRe.MatchString(s) }

// ValidTag reports whether s can be a template tag (Docker tag syntax).
func ValidTag(s string) bool { return tagRe.MatchString(s) }

// Validate checks a definition whose defaults were applied and returns nil or an
// error wrapping ErrInvalidDefinition that lists every problem found.
func (d Definition) Validate() error {
	var v validator
	v.name(d)
	v.check(suiteRe.MatchString(d.Suite), "suite", "%q is not a Debian suite name", d.Suite)
	v.check(contains(variants, d.Variant), "variant", "%q not supported (want one of %s)", d.Variant, strings.Join(variants, ", "))
	for i, p := range d.Packages {
		v.check(pkgRe.MatchString(p), fmt.Sprintf("packages[%d]", i), "%q is not a Debian package name (name, name=version or name/release)", p)
	}
	v.args("pip", d.Pip)
	v.args("npm", d.Npm)
	for i, p := range d.Npm {
		v.check(npmNameRe.MatchString(p), fmt.Sprintf("npm[%d]", i), "%q is not an npm package name ([@scope/]name[@version])", p)
	}
	v.check(len(d.Npm) == 0 || hasPackage(d.Packages, "nodejs"), "npm", "global npm packages need \"nodejs\" in packages")
	v.args("run", d.Run)
	v.env(d.Env)
	v.check(userRe.MatchString(d.User), "user", "%q is not a valid user name", d.User)
	v.check(isCleanAbs(d.Workdir), "workdir", "%q must be an absolute, clean path", d.Workdir)
	v.check(d.Runtime == "" || contains(Runtimes, d.Runtime), "runtime", "%q not supported (want one of %s, or omit it for the server's default)",
		d.Runtime, strings.Join(Runtimes, ", "))
	v.files(d)
	return v.err()
}

// validator collects field errors.
type validator struct{ errs []error }

func (v *validator) check(ok bool, field, format string, args ...any) {
	if !ok {
		v.errs = append(v.errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w:\n%w", ErrInvalidDefinition, errors.Join(v.errs...))
}

func (v *validator) name(d Definition) {
	v.check(d.Name != "", "name", "required")
	v.check(d.Name == "" || nameRe.MatchString(d.Name), "name", "%q must match %s", d.Name, nameRe)
	seen := map[string]bool{d.Name: true}
	for i, a := range d.Aliases {
		f := fmt.Sprintf("aliases[%d]", i)
		v.check(nameRe.MatchString(a), f, "%q must match %s", a, nameRe)
		v.check(!seen[a], f, "%q duplicates the name or another alias", a)
		seen[a] = true
	}
}

// args checks a list of strings passed as single arguments or commands.
func (v *validator) args(field string, list []string) {
	for i, s := range list {
		f := fmt.Sprintf("%s[%d]", field, i)
		v.check(strings.TrimSpace(s) != "", f, "empty")
		v.check(!strings.ContainsRune(s, 0), f, "contains a NUL byte")
		if field != "run" {
			v.check(!strings.HasPrefix(s, "-"), f, "%q looks like an option; only package specifiers are allowed", s)
			v.check(!strings.ContainsAny(s, "\n\r"), f, "contains a newline")
		}
	}
}

func (v *validator) env(env map[string]string) {
	for _, k := range sortedKeys(env) {
		val := env[k]
		f := fmt.Sprintf("env[%q]", k)
		v.check(envKeyRe.MatchString(k), f, "key must match %s", envKeyRe)
		v.check(!strings.ContainsAny(val, "\x00\n\r\"\\"), f, "value must not contain NUL, newlines, quotes or backslashes")
	}
}

func (v *validator) files(d Definition) {
	for _, dest := range sortedKeys(d.Files) {
		f := d.Files[dest]
		field := fmt.Sprintf("files[%q]", dest)
		v.check(isCleanAbs(dest) && dest != "/", field, "destination must be an absolute, clean path other than /")
		v.check(!underVolatile(dest), field, "destination is under a directory that is not part of the tree (%s)", strings.Join(volatileDirs, ", "))
		v.check((f.Source == "") != (f.Content == nil), field, "needs exactly one of source or content")
		v.check(f.Mode&^0o7777 == 0, field+".mode", "%o has bits outside 07777", uint32(f.Mode))
		v.check(f.Owner == "" || f.Owner == "root" || f.Owner == DefaultUser || f.Owner == d.User,
			field+".owner", "%q must be root, %s or %s", f.Owner, DefaultUser, d.User)
		if f.Source != "" {
			v.source(d.src, field+".source", f.Source)
		}
	}
}

func (v *validator) source(src fs.FS, field, name string) {
	if !fs.ValidPath(name) || name == "." {
		v.check(false, field, "%q must be a relative path inside the definition directory", name)
		return
	}
	if src == nil {
		v.check(false, field, "%q: definition has no source directory", name)
		return
	}
	st, err := fs.Stat(src, name)
	if err != nil {
		v.check(false, field, "%v", err)
		return
	}
	v.check(st.Mode().IsRegular(), field, "%q is not a regular file", name)
}

// volatileDirs are emptied by mmdebstrap or mounted over at run time.
var volatileDirs = []string{"/dev", "/proc", "/run", "/sys", "/tmp"}

func underVolatile(p string) bool {
	for _, d := range volatileDirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

func isCleanAbs(p string) bool {
	return strings.HasPrefix(p, "/") && path.Clean(p) == p && !strings.ContainsAny(p, "\x00\n\r")
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// hasPackage reports whether list names Debian package name (any version suffix).
func hasPackage(list []string, name string) bool {
	for _, p := range list {
		if pkgName(p) == name {
			return true
		}
	}
	return false
}

// pkgName strips a =version or /release suffix.
func pkgName(p string) string {
	if i := strings.IndexAny(p, "=/"); i >= 0 {
		return p[:i]
	}
	return p
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Includes returns the Debian packages mmdebstrap installs (--include): the
// definition's packages plus what every template needs (python3, python, sudo,
// passwd, bash, libnss-myhostname) and what pip/npm need, sorted and de-duplicated by package name.
func (d Definition) Includes() []string {
	// libnss-myhostname resolves whatever hostname the sandbox gets, so sudo never
	// warns "unable to resolve host".
	implicit := []string{"python3", "python-is-python3", "sudo", "passwd", "bash", "libnss-myhostname"}
	if len(d.Pip) > 0 {
		implicit = append(implicit, "python3-pip", "ca-certificates")
	}
	if len(d.Npm) > 0 {
		implicit = append(implicit, "npm", "ca-certificates")
	}
	out := append([]string(nil), d.Packages...)
	for _, p := range implicit {
		if !hasPackage(out, p) {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return dedup(out)
}

func dedup(sorted []string) []string {
	out := sorted[:0]
	for i, s := range sorted {
		if i == 0 || s != sorted[i-1] {
			out = append(out, s)
		}
	}
	return out
}
