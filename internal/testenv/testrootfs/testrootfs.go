// Package testrootfs builds tiny root filesystem trees for tests: a static
// busybox with a symlink per applet.
package testrootfs

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// BusyboxPath is where Debian's busybox-static installs its binary.
const BusyboxPath = "/bin/busybox"

// Busybox fills dir (created if missing) with bin/busybox copied from BusyboxPath,
// a bin/<applet> symlink for every applet it lists, and empty proc, sys, dev, tmp
// (mode 1777), etc and root directories. Errors come from the filesystem or from
// running busybox --list.
func Busybox(dir string) error {
	for _, d := range []string{"bin", "proc", "sys", "dev", "etc", "root", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return fmt.Errorf("busybox tree: %w", err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o777|os.ModeSticky); err != nil {
		return fmt.Errorf("busybox tree: %w", err)
	}
	if err := copyFile(BusyboxPath, filepath.Join(dir, "bin", "busybox")); err != nil {
		return fmt.Errorf("busybox tree: %w", err)
	}
	out, err := exec.Command(BusyboxPath, "--list").Output()
	if err != nil {
		return fmt.Errorf("busybox tree: busybox --list: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		name := sc.Text()
		if name == "" || name == "busybox" {
			continue
		}
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", name)); err != nil && !os.IsExist(err) {
			return fmt.Errorf("busybox tree: %w", err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
