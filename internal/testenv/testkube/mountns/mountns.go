// Package mountns empties a new mount namespace of the host's mounts a
// process does not need. A namespace made by unshare(CLONE_NEWNS) while the
// host's mounts are private (no peer group) starts with a copy of every mount
// of the host at that moment, and the copies outlive the originals: a sandbox
// disk (ext4 on a loop device), an overlay rootfs or a namespace file
// unmounted on the host stays mounted in the copy and keeps its loop device
// busy for as long as the namespace lives. The node tier's kubelet runs in
// such a namespace (package testkube), beside test suites that mount and
// unmount sandboxes all the time; Drop detaches their copies before it starts.
package mountns

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// kernelMounts are the mount points kept with everything below them: the
// kernel's filesystems a kubelet reads and writes (cgroups, sysctls, devices).
var kernelMounts = []string{"/proc", "/sys", "/dev"}

// Keep says which mounts stay in the namespace.
type Keep struct {
	// Trees are kept with every mount below them (a work directory, a file).
	Trees []string
	// Paths keep only the mounts they lie in (a separate /usr or /var, a
	// bind-mounted /etc/resolv.conf), not the mounts below them.
	Paths []string
}

// Kept reports whether mount point m stays: "/", /run itself, the kernel
// filesystems and what is below them, k.Trees and what is below them, and
// the mounts a tree or path of k lies in.
func (k Keep) Kept(m string) bool {
	if m == "/" || m == "/run" {
		return true
	}
	for _, t := range append(slices.Clone(kernelMounts), k.Trees...) {
		if m == t || strings.HasPrefix(m, t+"/") {
			return true
		}
	}
	for _, p := range append(slices.Clone(k.Trees), k.Paths...) {
		if p == m || strings.HasPrefix(p, m+"/") {
			return true
		}
	}
	return false
}

// ToDrop returns the points (in mountinfo order, one per mount, so a point
// with mounts stacked on it appears as often) that k does not keep, deepest
// first and, at equal depth, last mounted first.
func (k Keep) ToDrop(points []string) []string {
	var drop []string
	for i := len(points) - 1; i >= 0; i-- {
		if !k.Kept(points[i]) {
			drop = append(drop, points[i])
		}
	}
	depth := func(p string) int { return strings.Count(p, "/") }
	slices.SortStableFunc(drop, func(a, b string) int { return depth(b) - depth(a) })
	return drop
}

// Drop lazily unmounts (MNT_DETACH: a busy mount is detached at once and
// freed when its last user goes) every mount of the calling process's mount
// namespace that k does not keep, deepest first. It refuses to run in its
// parent's mount namespace (it would unmount the host's mounts): run it
// under unshare --mount.
func (k Keep) Drop() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	parent, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", os.Getppid()))
	if err != nil {
		return err
	}
	if self == parent {
		return fmt.Errorf("refusing to unmount in the parent's mount namespace %s: run under unshare --mount", self)
	}
	points, err := Points(mountinfo.SelfPath)
	if err != nil {
		return err
	}
	for _, m := range k.ToDrop(points) {
		if err := unix.Unmount(m, unix.MNT_DETACH); err != nil && err != unix.EINVAL && err != unix.ENOENT {
			return fmt.Errorf("umount -l %s: %w", m, err)
		}
	}
	return nil
}

// Points returns the mount points of a mountinfo file in its order,
// cleaned.
func Points(path string) ([]string, error) {
	mounts, err := mountinfo.Read(path)
	if err != nil {
		return nil, err
	}
	out := make([]string, 0, len(mounts))
	for _, m := range mounts {
		out = append(out, filepath.Clean(m.Point))
	}
	return out, nil
}
