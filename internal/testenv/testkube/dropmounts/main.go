// Command dropmounts is the node tier's kubelet launcher (package testkube):
// run in a new mount namespace (unshare --mount), it lazily unmounts the
// host's mounts the kubelet does not need (package mountns) and then executes
// its arguments.
//
//	dropmounts [-tree PATH ...] [-path PATH ...] -- COMMAND [ARG ...]
//
// -tree keeps the mounts at or below PATH and those it lies in; -path keeps
// only the mounts PATH lies in (mountns.Keep).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"syscall"

	"github.com/cubby-dev/cubby/internal/testenv/testkube/mountns"
)

// list collects a repeated flag.
type list []string

func (l *list) String() string     { return fmt.Sprint(*l) }
func (l *list) Set(v string) error { *l = append(*l, v); return nil }

func main() {
	var trees, paths list
	flag.Var(&trees, "tree", "keep the mounts at or below this path and those it lies in; repeatable")
	flag.Var(&paths, "path", "keep the mounts this path lies in; repeatable")
	flag.Parse()
	if flag.NArg() == 0 {
		fmt.Fprintln(os.Stderr, "dropmounts: no command")
		os.Exit(2)
	}
	if err := (mountns.Keep{Trees: trees, Paths: paths}).Drop(); err != nil {
		fmt.Fprintln(os.Stderr, "dropmounts:", err)
		os.Exit(1)
	}
	bin, err := exec.LookPath(flag.Arg(0))
	if err != nil {
		fmt.Fprintln(os.Stderr, "dropmounts:", err)
		os.Exit(1)
	}
	err = syscall.Exec(bin, flag.Args(), os.Environ())
	fmt.Fprintln(os.Stderr, "dropmounts: exec:", err)
	os.Exit(1)
}
