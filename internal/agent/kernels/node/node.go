// Package node embeds Cubby's Jupyter kernel for Node.js (the files under
// nodekernel/): a launcher around the jp-kernel library that runs
// JavaScript and TypeScript cells with Node semantics (require, ESM import,
// top-level await, packages installed with npm in the sandbox) and interrupts
// a running cell without losing the session's state. The code-interpreter
// template installs the files under InstallDir and the kernelspec
// (KernelSpecFile) as the "javascript" kernel; jp-kernel (built against
// Debian's libzmq) and the TypeScript compiler come from npm.
package node

import (
	"embed"
	"io/fs"
)

// InstallDir is where the code-interpreter template installs the kernel's
// files; the kernelspec's argv names InstallDir/kernel.js.
const InstallDir = "/usr/local/lib/cubby/nodekernel"

// KernelSpecName is the kernelspec the kernel is installed as.
const KernelSpecName = "javascript"

// KernelSpecFile is the kernelspec's path in Files.
const KernelSpecFile = "nodekernel/kernel.json"

//go:embed nodekernel/kernel.js nodekernel/session.js nodekernel/transform.js nodekernel/kernel.json
var sourceFS embed.FS

// Files returns the kernel's files as nodekernel/<name> (kernel.js,
// session.js, transform.js and the kernelspec kernel.json); the
// code-interpreter template installs them from here.
func Files() fs.FS { return sourceFS }
