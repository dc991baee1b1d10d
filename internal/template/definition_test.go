package template

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"testing/fstest"
)

const fullYAML = `
name: my-tpl
aliases: [other, third_one]
packages: [nodejs, jq=1.6-2.1, "curl/bookworm"]
pip: ["numpy==1.26.*", six]
npm: ["@scope/pkg@1.2.3", left-pad]
files:
  /usr/local/bin/tool: tool.sh
  /home/user/.config/x.ini:
    content: "a = 1\n"
    mode: 0600
  /etc/motd:
    content: ""
    mode: "0640"
    owner: root
run:
  - echo "it's" > /etc/quoted
env:
  FOO: bar baz
  LANG: C.UTF-8
`

func srcFS() fstest.MapFS {
	return fstest.MapFS{"tool.sh": {Data: []byte("#!/bin/sh\necho tool\n"), Mode: 0o755}}
}

func TestParseDefinitionFull(t *testing.T) {
	d, err := ParseDefinition([]byte(fullYAML), srcFS())
	if err != nil {
		t.Fatal(err)
	}
	if d.Suite != "bookworm" || d.Variant != "minbase" || d.User != "user" || d.Workdir != "/home/user" {
		t.Fatalf("defaults not applied: %+v", d)
	}
	if got := d.Files["/home/user/.config/x.ini"]; got.Mode != 0o600 || got.Content == nil || *got.Content != "a = 1\n" {
		t.Fatalf("inline file: %+v", got)
	}
	if got := d.Files["/etc/motd"]; got.Mode != 0o640 || got.Owner != "root" || got.Content == nil || *got.Content != "" {
		t.Fatalf("empty inline file: %+v", got)
	}
	if got := d.Files["/usr/local/bin/tool"]; got.Source != "tool.sh" {
		t.Fatalf("source file: %+v", got)
	}
	files, err := d.resolveFiles()
	if err != nil {
		t.Fatal(err)
	}
	modes := map[string]uint32{}
	for _, f := range files {
		modes[f.Dest] = f.Mode
	}
	if modes["/usr/local/bin/tool"] != 0o755 || modes["/etc/motd"] != 0o640 {
		t.Fatalf("effective modes: %v", modes)
	}
	inc := strings.Join(d.Includes(), ",")
	for _, p := range []string{"python3", "python-is-python3", "sudo", "python3-pip", "npm", "jq=1.6-2.1", "curl/bookworm"} {
		if !strings.Contains(","+inc+",", ","+p+",") {
			t.Errorf("Includes() = %s, missing %s", inc, p)
		}
	}
}

func TestParseDefinitionErrors(t *testing.T) {
	cases := []struct{ yaml, want string }{
		{`aliases: [x]`, "name: required"},
		{`name: Bad`, `name: "Bad" must match`},
		{"name: a\naliases: [a]", `aliases[0]: "a" duplicates`},
		{"name: a\nvariant: custom", `variant: "custom" not supported`},
		{"name: a\nsuite: 'x y'", `suite: "x y" is not a Debian suite`},
		{"name: a\npackages: ['a,b']", `packages[0]: "a,b" is not a Debian package`},
		{"name: a\npip: ['--index-url=x']", `pip[0]: "--index-url=x" looks like an option`},
		{"name: a\nnpm: [left-pad]", `npm: global npm packages need "nodejs"`},
		{"name: a\npackages: [nodejs]\nnpm: ['a b']", `npm[0]: "a b" is not an npm package`},
		{"name: a\nrun: ['  ']", "run[0]: empty"},
		{"name: a\nenv: {1X: y}", `env["1X"]: key must match`},
		{"name: a\nenv: {X: \"a\\nb\"}", `env["X"]: value must not contain`},
		{"name: a\nuser: Root", `user: "Root" is not a valid user name`},
		{"name: a\nworkdir: rel/dir", `workdir: "rel/dir" must be an absolute`},
		{"name: a\nfiles: {rel: tool.sh}", `files["rel"]: destination must be an absolute`},
		{"name: a\nfiles: {/tmp/x: tool.sh}", `files["/tmp/x"]: destination is under`},
		{"name: a\nfiles: {/x: {content: a, source: tool.sh}}", `files["/x"]: needs exactly one of source or content`},
		{"name: a\nfiles: {/x: {}}", `files["/x"]: needs exactly one of source or content`},
		{"name: a\nfiles: {/x: ../tool.sh}", `files["/x"].source: "../tool.sh" must be a relative path`},
		{"name: a\nfiles: {/x: missing.sh}", `files["/x"].source: open missing.sh: file does not exist`},
		{"name: a\nfiles: {/x: {content: a, owner: bob}}", `files["/x"].owner: "bob" must be root, user or user`},
		{"name: a\nfiles: {/x: {content: a, mode: 0100000}}", `files["/x"].mode: 100000 has bits outside`},
		{"name: a\nfiles: {/x: {content: a, mode: '9'}}", `mode "9": not an octal number`},
		{"name: a\nfiles: {/x: {content: a, colour: red}}", `unknown field "colour"`},
		{"name: a\nbogus: 1", `unknown field "bogus"`},
	}
	for _, c := range cases {
		_, err := ParseDefinition([]byte(c.yaml), srcFS())
		if err == nil || !errors.Is(err, ErrInvalidDefinition) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("ParseDefinition(%q) = %v, want ErrInvalidDefinition containing %q", c.yaml, err, c.want)
		}
	}
}

func TestParseDefinitionReportsAllProblems(t *testing.T) {
	_, err := ParseDefinition([]byte("name: a\nuser: X\nworkdir: y"), nil)
	if err == nil || !strings.Contains(err.Error(), "user:") || !strings.Contains(err.Error(), "workdir:") {
		t.Fatalf("want both user and workdir errors, got %v", err)
	}
}

func TestLoadDefinition(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadDefinition(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing file: %v", err)
	}
	write(t, filepath.Join(dir, DefinitionFile), "name: loaded\nfiles:\n  /etc/x: sub/x.txt\n", 0o644)
	if _, err := LoadDefinition(dir); err == nil || !strings.Contains(err.Error(), "sub/x.txt") {
		t.Fatalf("missing source: %v", err)
	}
	write(t, filepath.Join(dir, "sub", "x.txt"), "hello", 0o644)
	d, err := LoadDefinition(dir)
	if err != nil {
		t.Fatal(err)
	}
	files, err := d.resolveFiles()
	if err != nil || len(files) != 1 || string(files[0].content) != "hello" || files[0].Mode != 0o644 {
		t.Fatalf("resolveFiles = %+v, %v", files, err)
	}
}

func TestDigestStable(t *testing.T) {
	base := func() Definition {
		d, err := ParseDefinition([]byte(fullYAML), srcFS())
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	d1, err := base().Digest()
	if err != nil {
		t.Fatal(err)
	}
	if !regexp.MustCompile(`^[0-9a-f]{32}$`).MatchString(d1) {
		t.Fatalf("digest %q", d1)
	}
	// Golden value: changes only when the canonical form or recipeVersion changes.
	if d1 != "18acd2e6a9ef46a78592a76ab34ea9d2" {
		t.Errorf("digest of fullYAML = %s; update the golden value only on purpose", d1)
	}
	same := base()
	same.Packages = []string{"curl/bookworm", "nodejs", "jq=1.6-2.1", "sudo"} // order, implicit package
	mustDigest(t, same, d1, true)
	unset := base()
	unset.Suite, unset.Variant, unset.User, unset.Workdir = "", "", "", ""
	mustDigest(t, unset, d1, true)

	changes := map[string]func(*Definition){
		"file content": func(d *Definition) {
			d.src = fstest.MapFS{"tool.sh": {Data: []byte("#!/bin/sh\necho other\n"), Mode: 0o755}}
		},
		"file mode": func(d *Definition) {
			d.src = fstest.MapFS{"tool.sh": {Data: []byte("#!/bin/sh\necho tool\n"), Mode: 0o644}}
		},
		"env": func(d *Definition) { d.Env = map[string]string{"FOO": "x"} },
		"run": func(d *Definition) { d.Run = append(d.Run, "true") },
		"run order": func(d *Definition) {
			d.Run = []string{"b", "a"}
		},
		"pip":     func(d *Definition) { d.Pip = d.Pip[:1] },
		"user":    func(d *Definition) { d.User = "root" },
		"suite":   func(d *Definition) { d.Suite = "trixie" },
		"aliases": func(d *Definition) { d.Aliases = nil },
	}
	for name, change := range changes {
		d := base()
		change(&d)
		got, err := d.Digest()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got == d1 {
			t.Errorf("changing %s did not change the digest", name)
		}
	}
	empty1, _ := Definition{Name: "x"}.Digest()
	empty2, _ := Definition{Name: "x", Aliases: []string{}, Env: map[string]string{}, Files: map[string]File{}}.Digest()
	if empty1 == "" || empty1 != empty2 {
		t.Errorf("nil and empty fields hash differently: %q %q", empty1, empty2)
	}
	if _, err := (Definition{Name: "Bad"}).Digest(); !errors.Is(err, ErrInvalidDefinition) {
		t.Errorf("Digest of invalid definition: %v", err)
	}
}

func mustDigest(t *testing.T, d Definition, want string, equal bool) {
	t.Helper()
	got, err := d.Digest()
	if err != nil {
		t.Fatal(err)
	}
	if (got == want) != equal {
		t.Errorf("digest %s vs %s, want equal=%v", got, want, equal)
	}
}

func TestIDFor(t *testing.T) {
	id := IDFor("base")
	if !regexp.MustCompile(`^[a-z2-7]{20}$`).MatchString(id) {
		t.Fatalf("IDFor(base) = %q", id)
	}
	if id != IDFor("base") || id == IDFor("base2") {
		t.Fatal("IDFor not deterministic or not distinct")
	}
	if id != "hodqgm5745u2yl5qlhlp" {
		t.Errorf("IDFor(base) = %s; IDs must never change", id)
	}
}

func TestBuiltins(t *testing.T) {
	names := BuiltinNames()
	if !contains(names, "base") {
		t.Fatalf("BuiltinNames() = %v", names)
	}
	for _, n := range names {
		data, err := builtinFS.ReadFile("builtin/" + n + "/" + DefinitionFile)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseDefinition(data, nil); err != nil && !strings.Contains(err.Error(), "source") {
			t.Errorf("builtin %s: %v", n, err)
		}
		d, ok := Builtin(n)
		if !ok || d.Name != n {
			t.Errorf("Builtin(%q) = %+v, %v", n, d, ok)
		}
		if _, err := d.Digest(); err != nil {
			t.Errorf("builtin %s digest: %v", n, err)
		}
	}
	base, _ := Builtin("base")
	for _, p := range []string{"python3", "python-is-python3", "python3-pip", "git", "sudo", "curl", "procps", "locales"} {
		if !hasPackage(base.Includes(), p) {
			t.Errorf("base lacks %s", p)
		}
	}
	if base.User != "user" || base.Workdir != "/home/user" {
		t.Errorf("base user/workdir = %s %s", base.User, base.Workdir)
	}
	if _, ok := Builtin("nope"); ok {
		t.Error("Builtin(nope) found")
	}
	if _, ok := Builtin("../base"); ok {
		t.Error("Builtin(../base) found")
	}
}

// TestScriptsParse checks the generated shell with the real sh parser, using
// values that need quoting.
func TestScriptsParse(t *testing.T) {
	d, err := ParseDefinition([]byte(fullYAML), srcFS())
	if err != nil {
		t.Fatal(err)
	}
	d.Env["Q"] = "it's $HOME `x`"
	d.User = "alice"
	files, err := d.resolveFiles()
	if err != nil {
		t.Fatal(err)
	}
	ctx := filepath.Join(t.TempDir(), "ctx with 'quote'")
	ca := filepath.Join(t.TempDir(), "ca.crt")
	write(t, ca, "CA", 0o644)
	script, err := writeContext(ctx, d, files, ca)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{script, filepath.Join(ctx, "in", "setup.sh"), filepath.Join(ctx, "in", "run", "0.sh")} {
		if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("sh -n %s: %v\n%s", f, err, out)
		}
	}
	setup, _ := os.ReadFile(filepath.Join(ctx, "in", "setup.sh"))
	for _, want := range []string{"--uid 1000", "useradd --user-group --create-home --home-dir '/home/alice'",
		"NOPASSWD: ALL", "chown 'user': '/home/user/.config/x.ini'", "chown 'root': '/etc/motd'", "install -D -T -m 0600"} {
		if !strings.Contains(string(setup), want) {
			t.Errorf("setup.sh lacks %q:\n%s", want, setup)
		}
	}
	env, _ := os.ReadFile(filepath.Join(ctx, "in", "environment"))
	if !strings.Contains(string(env), "FOO=\"bar baz\"\n") {
		t.Errorf("environment = %q", env)
	}
	// Run the customize script's quoting for real: the printed "+ cmd" line must
	// come out verbatim.
	out, err := exec.Command("sh", "-c", "echo "+shq("+ "+d.Run[0])).Output()
	if err != nil || strings.TrimSpace(string(out)) != "+ "+d.Run[0] {
		t.Errorf("shq round trip: %q %v", out, err)
	}
}

func TestProgressWriter(t *testing.T) {
	var sb strings.Builder
	pw := newProgressWriter(&sb, []step{{"one"}, {"two"}, {"three"}})
	pw.Step(1)
	pw.Write([]byte("I: hello\n" + stepMarker + "2\npartial"))
	pw.Write([]byte(" line\n"))
	out := sb.String()
	for _, want := range []string{"[1/3] one… (", "I: hello\n", "[2/3] two… (", "partial line\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("progress output %q lacks %q", out, want)
		}
	}
	if strings.Contains(out, stepMarker) {
		t.Errorf("marker leaked: %q", out)
	}
	if tail := pw.Tail(); tail != "I: hello\npartial line" {
		t.Errorf("Tail() = %q", tail)
	}
}

func write(t *testing.T, name, content string, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(name, []byte(content), mode); err != nil {
		t.Fatal(err)
	}
}

func TestRuntimeField(t *testing.T) {
	for _, rt := range []string{"runc", "runsc"} {
		def, err := ParseDefinition([]byte("name: x\nruntime: "+rt+"\n"), nil)
		if err != nil || def.Runtime != rt {
			t.Fatalf("runtime %s: %+v, %v", rt, def, err)
		}
	}
	_, err := ParseDefinition([]byte("name: x\nruntime: kata\n"), nil)
	if !errors.Is(err, ErrInvalidDefinition) || !strings.Contains(err.Error(), "runtime: \"kata\" not supported") {
		t.Fatalf("bad runtime err = %v", err)
	}
	// The runtime is not a build input: existing trees stay valid.
	plain, _ := Definition{Name: "x"}.Digest()
	withRT, _ := Definition{Name: "x", Runtime: "runsc"}.Digest()
	if plain == "" || plain != withRT {
		t.Fatalf("digest changed with runtime: %q vs %q", plain, withRT)
	}
}
