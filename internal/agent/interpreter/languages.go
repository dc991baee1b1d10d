package interpreter

import (
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/agent/kernels/java"
	"github.com/cubby-dev/cubby/internal/agent/kernels/node"
)

// ErrUnknownLanguage is wrapped by errors for a language with no kernel here.
var ErrUnknownLanguage = errors.New("unsupported language")

// Normalised language names (docs/wire/code-interpreter.md: case-insensitive and trimmed, "js" →
// javascript, "ts" → typescript, "" → python). JavaScript and TypeScript run on
// Node.js, as on E2B; Deno is a language of its own.
const (
	LangPython     = "python"
	LangJavaScript = "javascript"
	LangTypeScript = "typescript"
	LangR          = "r"
	LangBash       = "bash"
	LangJava       = "java"
	LangDeno       = "deno"
)

// Start bounds of Java contexts: one attempt's wait for the kernel's answer
// once connected, and the whole start (several attempts).
const (
	javaHandshakeTimeout = 30 * time.Second
	javaStartTimeout     = 2 * time.Minute
)

// Kernelspec names the code-interpreter template installs for Node.js and Java.
const (
	nodeKernelSpec = node.KernelSpecName
	javaKernelSpec = java.KernelSpecName
)

// NormalizeLanguage maps a request's language to its canonical name.
func NormalizeLanguage(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "":
		return LangPython
	case "js":
		return LangJavaScript
	case "ts":
		return LangTypeScript
	}
	return s
}

// envCode generates the silent snippets that change a kernel's environment:
// set assigns vars, save also remembers the previous values (absent = unset)
// inside the kernel, restore puts them back and forgets them.
type envCode struct {
	set     func(vars map[string]string) string
	save    func(vars map[string]string) string
	restore string
}

// language says how this host runs one language's code: a Jupyter kernelspec
// (with launch options) or the native bash engine.
type language struct {
	name   string
	bash   bool
	spec   *jupyter.KernelSpec
	python bool          // ipykernel: gets the display extension and Python argv flags
	tcp    bool          // the kernel cannot use ipc sockets (Deno)
	settle time.Duration // jupyter.Options.SettleDelay (Deno publishes out of order)
	// handshake is jupyter.Options.HandshakeTimeout and start, when longer
	// than Config.StartTimeout, the bound of a start (the JVM is slow to
	// start and its kernel sometimes never answers a first start).
	handshake, start time.Duration
	extraEnv         []string
	env              *envCode // nil: per-request env vars unsupported
}

// findLanguage finds how to run language name (already normalised) on this host:
// python → kernelspec python3/python; javascript and typescript → kernelspec
// "javascript" (Cubby's Node.js kernel, tcp); deno → kernelspec "deno" or a
// `deno` binary on path (`deno jupyter --kernel`, interrupted by message, tcp);
// java → kernelspec "java" (tcp); r → kernelspec "ir"; bash → native; any other
// name → the kernelspec of that name. Errors wrap ErrUnknownLanguage.
func findLanguage(name string, specDirs []string, path string) (*language, error) {
	switch name {
	case LangBash:
		return &language{name: name, bash: true}, nil
	case LangPython:
		ks, err := firstSpec(specDirs, "python3", "python")
		if err != nil {
			return nil, unknown(name, specDirs, "install ipykernel")
		}
		return &language{name: name, spec: ks, python: true, env: pythonEnv}, nil
	case LangJavaScript, LangTypeScript:
		ks, err := firstSpec(specDirs, nodeKernelSpec)
		if err != nil {
			return nil, unknown(name, specDirs, "install Cubby's Node.js kernel (code-interpreter template)")
		}
		return &language{name: name, spec: ks, tcp: true, env: nodeEnv}, nil
	case LangDeno:
		ks, err := denoSpec(specDirs, path)
		if err != nil {
			return nil, unknown(name, specDirs, "install Deno (deno jupyter)")
		}
		return &language{name: name, spec: ks, tcp: true, settle: 25 * time.Millisecond, env: denoEnv,
			extraEnv: []string{"NO_COLOR=1", "DENO_NO_UPDATE_CHECK=1"}}, nil
	case LangJava:
		ks, err := firstSpec(specDirs, javaKernelSpec)
		if err != nil {
			return nil, unknown(name, specDirs, "install a Java kernel (code-interpreter template)")
		}
		return &language{name: name, spec: ks, tcp: true, env: javaEnv,
			handshake: javaHandshakeTimeout, start: javaStartTimeout}, nil
	case LangR:
		ks, err := firstSpec(specDirs, "ir")
		if err != nil {
			return nil, unknown(name, specDirs, "install IRkernel")
		}
		return &language{name: name, spec: ks, env: rEnv}, nil
	}
	ks, err := jupyter.LookupKernelSpec(specDirs, name)
	if err != nil {
		return nil, unknown(name, specDirs, "no kernelspec of that name")
	}
	lang := &language{name: name, spec: ks}
	if strings.EqualFold(ks.Language, "python") {
		lang.env = pythonEnv
	}
	return lang, nil
}

func unknown(language string, specDirs []string, hint string) error {
	var names []string
	for _, ks := range jupyter.FindKernelSpecs(specDirs) {
		names = append(names, ks.Name)
	}
	sort.Strings(names)
	return fmt.Errorf("%w %q (%s); installed kernelspecs: [%s], plus native bash",
		ErrUnknownLanguage, language, hint, strings.Join(names, ", "))
}

func firstSpec(dirs []string, names ...string) (*jupyter.KernelSpec, error) {
	var err error
	for _, n := range names {
		var ks *jupyter.KernelSpec
		if ks, err = jupyter.LookupKernelSpec(dirs, n); err == nil {
			return ks, nil
		}
	}
	return nil, err
}

// denoSpec returns the "deno" kernelspec or one built from the deno binary on
// path; Deno needs interrupt_request (SIGINT kills it).
func denoSpec(dirs []string, path string) (*jupyter.KernelSpec, error) {
	ks, err := jupyter.LookupKernelSpec(dirs, "deno")
	if err != nil {
		bin, lerr := lookPathIn("deno", path)
		if lerr != nil {
			return nil, lerr
		}
		ks = &jupyter.KernelSpec{Name: "deno", Argv: []string{bin, "jupyter", "--kernel", "--conn", "{connection_file}"},
			DisplayName: "Deno", Language: "typescript"}
	}
	cp := *ks
	cp.InterruptMode = "message"
	return &cp, nil
}

// lookPathIn finds an executable in a PATH-style list.
func lookPathIn(name, path string) (string, error) {
	for _, d := range filepath.SplitList(path) {
		if d == "" {
			continue
		}
		if p, err := exec.LookPath(filepath.Join(d, name)); err == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s not found in %q", name, path)
}

// lit encodes v as a JSON literal, which is also a valid Python, JavaScript and R
// string/array/object literal for string data (R gets its own list syntax).
func lit(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var pythonEnv = &envCode{
	set: func(v map[string]string) string {
		return "__import__('os').environ.update(" + lit(v) + ")"
	},
	save: func(v map[string]string) string {
		return "__import__('os')._cubby_saved_env = {__k: __import__('os').environ.get(__k) for __k in " +
			lit(sortedKeys(v)) + "}\n__import__('os').environ.update(" + lit(v) + ")"
	},
	restore: "import os as __cubby_os\n" +
		"for __cubby_k, __cubby_v in getattr(__cubby_os, '_cubby_saved_env', {}).items():\n" +
		"    if __cubby_v is None:\n        __cubby_os.environ.pop(__cubby_k, None)\n" +
		"    else:\n        __cubby_os.environ[__cubby_k] = __cubby_v\n" +
		"__cubby_os._cubby_saved_env = {}\n" +
		"for __cubby_n in ('__cubby_os', '__cubby_k', '__cubby_v', '__cubby_n'):\n" +
		"    globals().pop(__cubby_n, None)",
}

var denoEnv = &envCode{
	set: func(v map[string]string) string {
		return "for (const [k, v] of Object.entries(" + lit(v) + ")) Deno.env.set(k, v);"
	},
	save: func(v map[string]string) string {
		return "globalThis.__cubbySavedEnv = {};\n" +
			"for (const [k, v] of Object.entries(" + lit(v) + ")) {\n" +
			"  globalThis.__cubbySavedEnv[k] = Deno.env.get(k) ?? null;\n  Deno.env.set(k, v);\n}"
	},
	restore: "for (const [k, v] of Object.entries(globalThis.__cubbySavedEnv ?? {})) {\n" +
		"  if (v === null) Deno.env.delete(k); else Deno.env.set(k, v);\n}\n" +
		"delete globalThis.__cubbySavedEnv;",
}

// nodeEnv changes process.env of the Node.js session (child processes inherit it).
var nodeEnv = &envCode{
	set: func(v map[string]string) string {
		return "Object.assign(process.env, " + lit(v) + ");"
	},
	save: func(v map[string]string) string {
		return "globalThis.__cubbySavedEnv = {};\n" +
			"for (const [k, v] of Object.entries(" + lit(v) + ")) {\n" +
			"  globalThis.__cubbySavedEnv[k] = k in process.env ? process.env[k] : null;\n  process.env[k] = v;\n}"
	},
	restore: "for (const [k, v] of Object.entries(globalThis.__cubbySavedEnv || {})) {\n" +
		"  if (v === null) delete process.env[k]; else process.env[k] = v;\n}\n" +
		"delete globalThis.__cubbySavedEnv;",
}

// javaEnv sets Java system properties (System.getProperty), as E2B's Java
// kernel does: a JVM cannot change its own environment. The sandbox env is also
// the kernel's process environment (System.getenv) as of its start.
var javaEnv = &envCode{
	set: func(v map[string]string) string {
		var b strings.Builder
		for _, k := range sortedKeys(v) {
			b.WriteString("System.setProperty(" + lit(k) + ", " + lit(v[k]) + ");\n")
		}
		return b.String()
	},
	save: func(v map[string]string) string {
		var b strings.Builder
		b.WriteString("java.util.Map<String, String> __cubbySavedEnv = new java.util.HashMap<>();\n")
		for _, k := range sortedKeys(v) {
			b.WriteString("__cubbySavedEnv.put(" + lit(k) + ", System.setProperty(" + lit(k) + ", " + lit(v[k]) + "));\n")
		}
		return b.String()
	},
	restore: "for (var __cubbyE : __cubbySavedEnv.entrySet()) {\n" +
		"  if (__cubbyE.getValue() == null) System.clearProperty(__cubbyE.getKey());\n" +
		"  else System.setProperty(__cubbyE.getKey(), __cubbyE.getValue());\n}\n" +
		"__cubbySavedEnv.clear();",
}

// rList renders vars as an R list(name = "value", ...) call.
func rList(v map[string]string) string {
	parts := make([]string, 0, len(v))
	for _, k := range sortedKeys(v) {
		parts = append(parts, lit(k)+" = "+lit(v[k]))
	}
	return "list(" + strings.Join(parts, ", ") + ")"
}

var rEnv = &envCode{
	set: func(v map[string]string) string {
		return "invisible(do.call(Sys.setenv, " + rList(v) + "))"
	},
	save: func(v map[string]string) string {
		keys := sortedKeys(v)
		q := make([]string, len(keys))
		for i, k := range keys {
			q[i] = lit(k)
		}
		return "assign('.cubby_saved_env', Sys.getenv(c(" + strings.Join(q, ", ") +
			"), unset = NA, names = TRUE), envir = globalenv())\n" +
			"invisible(do.call(Sys.setenv, " + rList(v) + "))"
	},
	restore: "local({\n" +
		"  s <- get0('.cubby_saved_env', envir = globalenv(), ifnotfound = NULL)\n" +
		"  for (k in names(s)) {\n" +
		"    if (is.na(s[[k]])) Sys.unsetenv(k) else do.call(Sys.setenv, setNames(list(s[[k]]), k))\n" +
		"  }\n" +
		"  if (!is.null(s)) rm('.cubby_saved_env', envir = globalenv())\n" +
		"})",
}
