package agent

import (
	"bufio"
	"bytes"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
)

// module is this repository's Go module path.
const module = "github.com/cubby-dev/cubby"

// Classes of the package map. Every package of the module is in one.
const (
	// classAgent runs inside the sandbox, in the agent process: everything
	// under internal/agent except the kernels' files.
	classAgent = "agent"
	// classContract is what both sides agree on: the agent's wire types,
	// ports and defaults (internal/agentapi/...), envd's protobuf types
	// (internal/envdpb/...), the /files URL signatures (internal/filesig) and
	// the files the template builder installs for the interpreter's kernels
	// (internal/agent/kernels/...).
	classContract = "contract"
	// classShared reads kernel interfaces for either side without belonging
	// to one: cgroupfs and mountinfo.
	classShared = "shared"
	// classEntry is the binary's entry point, which starts either process.
	classEntry = "entry"
	// classHost is everything else: the server, its backends and runtimes,
	// the CLI's client commands, the SDK, tests and tools.
	classHost = "host"
)

// agentEntries are the agent packages the entry point may start.
var agentEntries = []string{"internal/agent", "internal/agent/initproc"}

// classify returns the class of a package path relative to the module.
func classify(rel string) string {
	under := func(root string) bool { return rel == root || strings.HasPrefix(rel, root+"/") }
	switch {
	case under("internal/agentapi"), under("internal/envdpb"), rel == "internal/filesig", under("internal/agent/kernels"):
		return classContract
	case under("internal/agent"):
		return classAgent
	case rel == "internal/cgroups", rel == "internal/rootfs/mountinfo":
		return classShared
	case rel == "cmd/cubby", rel == "internal/cli":
		return classEntry
	}
	return classHost
}

// arrowAllowed says whether package from (class fc) may import package to
// (class tc), both relative to the module, and why not.
func arrowAllowed(from, fc, to, tc string) (bool, string) {
	switch {
	case fc == classAgent && tc != classAgent && tc != classContract && tc != classShared:
		return false, "the agent imports a " + tc + " package"
	case fc == classContract && tc != classContract:
		return false, "a contract imports a " + tc + " package (contracts import only contracts)"
	case fc == classShared && tc != classShared:
		return false, "a shared reader imports a " + tc + " package"
	case fc == classHost && tc == classAgent:
		return false, "a host package imports an agent internal (only contracts are shared)"
	case fc == classEntry && tc == classAgent && !slices.Contains(agentEntries, to):
		return false, "the entry point imports an agent internal other than the agent's entry packages"
	case (from == "sdk" || strings.HasPrefix(from, "sdk/")) && tc != classContract && to != "sdk" && !strings.HasPrefix(to, "sdk/"):
		return false, "the public SDK imports a " + tc + " package (it may import contracts only)"
	}
	return true, ""
}

// modulePackages lists every package of the module with its module imports
// (not test imports), relative to the module: `go list -deps ./...` from the
// module root.
func modulePackages(t *testing.T) map[string][]string {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-deps", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./...")
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.String())
	}
	pkgs := map[string][]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		p, ok := relative(f[0])
		if !ok {
			continue
		}
		var imports []string
		for _, imp := range f[1:] {
			if r, ok := relative(imp); ok {
				imports = append(imports, r)
			}
		}
		pkgs[p] = imports
	}
	if len(pkgs) < 50 {
		t.Fatalf("go list found %d packages of the module:\n%s", len(pkgs), out)
	}
	return pkgs
}

// relative strips the module path; false for packages of other modules.
func relative(path string) (string, bool) {
	if path == module {
		return ".", true
	}
	return strings.CutPrefix(path, module+"/")
}

// TestArrows checks that the arrows between the sides point one way: the agent
// imports only agent packages, contracts and shared readers; contracts and
// shared readers import nothing of either side; host packages never import an
// agent internal; the public SDK imports only contracts. With -v it prints
// the package map.
func TestArrows(t *testing.T) {
	pkgs := modulePackages(t)
	byClass := map[string][]string{}
	for p, imports := range pkgs {
		fc := classify(p)
		byClass[fc] = append(byClass[fc], p)
		for _, imp := range imports {
			if ok, why := arrowAllowed(p, fc, imp, classify(imp)); !ok {
				t.Errorf("%s → %s: %s", p, imp, why)
			}
		}
	}
	for _, c := range []string{classAgent, classContract, classShared, classEntry, classHost} {
		sort.Strings(byClass[c])
		t.Logf("%s (%d): %s", c, len(byClass[c]), strings.Join(byClass[c], " "))
	}
	for _, p := range append([]string{"internal/agent/interpreter", "internal/agent/jupyter", "internal/agentapi/execapi"}, agentEntries...) {
		if _, ok := pkgs[p]; !ok {
			t.Errorf("package %s is missing from the map", p)
		}
	}
}

// TestArrowRules: each rule rejects the arrow it exists for.
func TestArrowRules(t *testing.T) {
	for _, c := range []struct {
		from, to string
		ok       bool
	}{
		{"internal/agent/interpreter", "internal/agent/jupyter", true},
		{"internal/agent/interpreter", "internal/agent/kernels/python", true},
		{"internal/agent", "internal/cgroups", true},
		{"internal/agent", "internal/backend", false},
		{"internal/agent/interpreter", "internal/gateway", false},
		{"internal/agentapi", "internal/linkdial", false},
		{"internal/agentapi/execapi", "internal/agentapi", true},
		{"internal/cgroups", "internal/rootfs", false},
		{"internal/template", "internal/agent/kernels/node", true},
		{"internal/template", "internal/agent/interpreter", false},
		{"internal/gateway", "internal/agentapi", true},
		{"internal/cli", "internal/agent", true},
		{"internal/cli", "internal/agent/users", false},
		{"sdk", "internal/agentapi/execapi", true},
		{"sdk", "internal/linkdial", false},
		{"sdk", "sdk/internal/apiclient", true},
	} {
		if ok, why := arrowAllowed(c.from, classify(c.from), c.to, classify(c.to)); ok != c.ok {
			t.Errorf("%s → %s allowed = %v (%s), want %v", c.from, c.to, ok, why, c.ok)
		}
	}
}
