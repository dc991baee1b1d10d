// Package python embeds Cubby's IPython extension, the Python package
// cubby_display, and the IPython kernel configuration that loads it. The
// extension makes Python kernels emit the rich results E2B's SDKs decode:
// e2b/data for pandas DataFrames, e2b/chart for matplotlib figures, numpy-safe
// application/json, plain tracebacks and displayed PIL images
// (docs/wire/code-interpreter.md). Templates install these files into the system Python path; a
// kernel launcher can instead Install them into a directory on PYTHONPATH.
package python

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ModuleName is the Python package and IPython extension name
// (`--IPKernelApp.extra_extensions=cubby_display`).
const ModuleName = "cubby_display"

// KernelConfigName is the file name of the kernel configuration returned by
// KernelConfig; IPython kernels read it from /etc/ipython, /usr/local/etc/ipython
// and the profile directory.
const KernelConfigName = "ipython_kernel_config.py"

//go:embed cubby_display/*.py ipython_kernel_config.py
var sourceFS embed.FS

// Files returns the extension's source files ("cubby_display/<name>.py") and the
// kernel configuration (KernelConfigName) as one file system; the code-interpreter
// template installs them from here.
func Files() fs.FS { return sourceFS }

// KernelConfig returns the content of ipython_kernel_config.py: NoColor
// tracebacks, PlainTextFormatter.max_seq_length = 0 and ModuleName in
// InteractiveShellApp.extra_extensions.
func KernelConfig() []byte {
	data, _ := sourceFS.ReadFile(KernelConfigName)
	return data
}

// Install writes the extension package into dir (dir/cubby_display/*.py, files
// 0644, directories 0755), creating dir if needed and overwriting older copies,
// so that PYTHONPATH=dir makes the extension importable. Errors wrap the
// failing file system operation.
func Install(dir string) error {
	return fs.WalkDir(sourceFS, ModuleName, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		dst := filepath.Join(dir, filepath.FromSlash(p))
		if d.IsDir() {
			if err := os.MkdirAll(dst, 0o755); err != nil {
				return fmt.Errorf("install %s: %w", ModuleName, err)
			}
			return nil
		}
		data, err := sourceFS.ReadFile(p)
		if err != nil {
			return fmt.Errorf("install %s: %w", ModuleName, err)
		}
		if err := os.WriteFile(dst, data, 0o644); err != nil {
			return fmt.Errorf("install %s: %w", ModuleName, err)
		}
		return nil
	})
}
