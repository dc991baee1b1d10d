package jupyter

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// ErrNoKernelSpec is wrapped by LookupKernelSpec when no directory holds the name.
var ErrNoKernelSpec = errors.New("no such kernelspec")

// KernelSpec describes how to launch a kernel (Jupyter client docs, "Kernel
// specs"): the kernel.json of directory Dir, named after that directory.
// Argv may contain "{connection_file}" and "{resource_dir}" placeholders.
// InterruptMode is "signal" (default: SIGINT to the process group) or "message"
// (interrupt_request on the control channel).
type KernelSpec struct {
	Name          string            `json:"-"`
	Dir           string            `json:"-"`
	Argv          []string          `json:"argv"`
	DisplayName   string            `json:"display_name"`
	Language      string            `json:"language"`
	InterruptMode string            `json:"interrupt_mode,omitempty"`
	Env           map[string]string `json:"env,omitempty"`
	Metadata      json.RawMessage   `json:"metadata,omitempty"`
}

// KernelSpecDirs returns the kernelspec search path in Jupyter's precedence order:
// each JUPYTER_PATH entry (jupyterPath, colon separated) + "/kernels", then
// <home>/.local/share/jupyter/kernels, /usr/local/share/jupyter/kernels and
// /usr/share/jupyter/kernels. Empty arguments are skipped.
func KernelSpecDirs(home, jupyterPath string) []string {
	var dirs []string
	for _, p := range filepath.SplitList(jupyterPath) {
		if p != "" {
			dirs = append(dirs, filepath.Join(p, "kernels"))
		}
	}
	if home != "" {
		dirs = append(dirs, filepath.Join(home, ".local/share/jupyter/kernels"))
	}
	return append(dirs, "/usr/local/share/jupyter/kernels", "/usr/share/jupyter/kernels")
}

// FindKernelSpecs reads every <dir>/<name>/kernel.json under dirs; the first
// directory naming a kernel wins. Missing directories are skipped; unreadable or
// invalid kernel.json files are skipped too (they cannot be launched anyway).
// Names are lower-cased as Jupyter does. The result is sorted by name.
func FindKernelSpecs(dirs []string) []*KernelSpec {
	seen := map[string]bool{}
	var out []*KernelSpec
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			name := strings.ToLower(e.Name())
			if seen[name] {
				continue
			}
			ks, err := ReadKernelSpec(filepath.Join(d, e.Name()))
			if err != nil {
				continue
			}
			seen[name] = true
			out = append(out, ks)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

// LookupKernelSpec returns the kernelspec called name (case-insensitive) from the
// first directory of dirs that has it, or an error wrapping ErrNoKernelSpec.
func LookupKernelSpec(dirs []string, name string) (*KernelSpec, error) {
	name = strings.ToLower(name)
	for _, d := range dirs {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if strings.ToLower(e.Name()) == name {
				return ReadKernelSpec(filepath.Join(d, e.Name()))
			}
		}
	}
	return nil, fmt.Errorf("kernelspec %q: %w", name, ErrNoKernelSpec)
}

// ReadKernelSpec parses dir/kernel.json. The spec must name a non-empty argv.
func ReadKernelSpec(dir string) (*KernelSpec, error) {
	b, err := os.ReadFile(filepath.Join(dir, "kernel.json"))
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("kernelspec %s: %w", dir, ErrNoKernelSpec)
		}
		return nil, fmt.Errorf("read kernelspec %s: %w", dir, err)
	}
	ks := &KernelSpec{}
	if err := json.Unmarshal(b, ks); err != nil {
		return nil, fmt.Errorf("parse kernelspec %s: %w", dir, err)
	}
	if len(ks.Argv) == 0 {
		return nil, fmt.Errorf("kernelspec %s: empty argv", dir)
	}
	ks.Name = strings.ToLower(filepath.Base(dir))
	ks.Dir = dir
	return ks, nil
}

// argv returns the launch command with the placeholders substituted.
func (ks *KernelSpec) argv(connFile string) []string {
	r := strings.NewReplacer("{connection_file}", connFile, "{resource_dir}", ks.Dir)
	out := make([]string, len(ks.Argv))
	for i, a := range ks.Argv {
		out[i] = r.Replace(a)
	}
	return out
}
