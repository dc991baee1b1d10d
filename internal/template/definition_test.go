package template

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
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

// TestSpecCompile checks that a definition compiles into the same build
// steps the E2B API takes: one COPY per owner, ENV, installs and run
// commands as root RUN steps, USER and WORKDIR last.
func TestSpecCompile(t *testing.T) {
	d, err := ParseDefinition([]byte(fullYAML), srcFS())
	if err != nil {
		t.Fatal(err)
	}
	spec, files, err := d.Spec()
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	deb := spec.From.Debian
	if deb == nil || deb.Suite != "bookworm" || !slices.Contains(deb.Packages, "sudo") || !slices.Contains(deb.Packages, "npm") {
		t.Fatalf("base = %+v", deb)
	}
	var kinds []string
	for _, st := range spec.Steps {
		kinds = append(kinds, st.Type+":"+strings.Join(st.Args[1:min(2, len(st.Args))], ""))
	}
	want := "COPY:/ COPY:/ ENV:bar baz WORKDIR: RUN:root RUN:root RUN:root USER: WORKDIR:"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("steps = %q, want %q", got, want)
	}
	if len(files) != 2 {
		t.Fatalf("%d archives, want 2 (root's files, user's files)", len(files))
	}
	got := map[string]string{}
	for _, st := range spec.Steps[:2] {
		f, _, err := files.Open("", st.FilesHash)
		if err != nil {
			t.Fatal(err)
		}
		eachEntry(f, func(h *tar.Header, _ io.Reader) error {
			got[h.Name] = fmt.Sprintf("%o %s", h.Mode, st.Args[2])
			return nil
		})
	}
	for name, want := range map[string]string{"usr/local/bin/tool": "755 root", "etc/motd": "640 root", "home/user/.config/x.ini": "600 user"} {
		if got[name] != want {
			t.Errorf("archive entry %s = %q, want %q", name, got[name], want)
		}
	}
	if !strings.Contains(spec.Steps[4].Args[0], "pip install") || !strings.Contains(spec.Steps[5].Args[0], "npm install -g") ||
		spec.Steps[6].Args[0] != "set -e\necho \"it's\" > /etc/quoted" {
		t.Errorf("run steps: %q %q %q", spec.Steps[4].Args[0], spec.Steps[5].Args[0], spec.Steps[6].Args[0])
	}
}

// TestScriptsParse checks the generated shell with the real sh parser, using
// names that need quoting.
func TestScriptsParse(t *testing.T) {
	for _, script := range []string{provisionScript + addUserScript(DefaultUser, true), addUserScript("alice", false)} {
		f := filepath.Join(t.TempDir(), "s.sh")
		write(t, f, script, 0o644)
		if out, err := exec.Command("sh", "-n", f).CombinedOutput(); err != nil {
			t.Errorf("sh -n: %v\n%s\n%s", err, out, script)
		}
	}
	if s := addUserScript(DefaultUser, true); !strings.Contains(s, "grep -qx 1000 || uid=1000") || !strings.Contains(s, "NOPASSWD: ALL") {
		t.Errorf("user script:\n%s", s)
	}
	out, err := exec.Command("sh", "-c", "echo "+shq("it's $HOME `x`")).Output()
	if err != nil || strings.TrimSpace(string(out)) != "it's $HOME `x`" {
		t.Errorf("shq round trip: %q %v", out, err)
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
		if spec, _, err := d.Spec(); err != nil || spec.Validate() != nil {
			t.Errorf("builtin %s spec: %v %v", n, err, spec.Validate())
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
	spec, _, err := Definition{Name: "x", Runtime: "runsc"}.Spec()
	if err != nil || spec.Runtime != "runsc" {
		t.Fatalf("spec runtime = %q, %v", spec.Runtime, err)
	}
}
