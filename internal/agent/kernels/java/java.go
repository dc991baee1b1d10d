// Package java embeds Cubby's launcher of the Java Jupyter kernel
// (javakernel/CubbyJavaKernel.java) and its kernelspec. The code-interpreter
// template installs the Rapaio Java kernel (JShell) from Maven Central and the
// JDK from Debian, compiles the launcher against the kernel's jar into
// InstallDir and installs the kernelspec as the "java" kernel.
package java

import (
	"embed"
	"io/fs"
)

// InstallDir is where the template compiles the launcher class; the kernelspec's
// class path names it.
const InstallDir = "/usr/local/share/java/cubby"

// KernelSpecName is the kernelspec the launcher is installed as.
const KernelSpecName = "java"

// KernelJar is where the template installs the Rapaio kernel's jar.
const KernelJar = "/usr/local/share/java/rapaio-jupyter-kernel.jar"

//go:embed javakernel/CubbyJavaKernel.java javakernel/kernel.json
var sourceFS embed.FS

// Files returns the launcher's source and the kernelspec as
// javakernel/CubbyJavaKernel.java and javakernel/kernel.json; the
// code-interpreter template installs them from here.
func Files() fs.FS { return sourceFS }
