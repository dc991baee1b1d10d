// Package testhost holds what tests need from this host: the repository
// root, free ports and subnets, random names, and the release of mounts a
// test left behind. It imports nothing of Cubby's server, so packages the
// server imports can use it in their tests.
package testhost

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/rootfs/mountinfo"
)

// RepoRoot returns the nearest directory at or above the working directory
// that holds go.mod. Errors: none found.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod above the working directory")
		}
		dir = parent
	}
}

// RandHex returns 2n random lowercase hex digits.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// ReleaseMounts detaches whatever is still mounted below dir once a server has
// stopped (runsc keeps a null-netns bind mount in its state root, and sandboxes left
// running by a crash test keep their rootfs), deepest first, so the data dir can be
// removed.
func ReleaseMounts(dir string) {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, m := range mounts {
		if strings.HasPrefix(m.Point, dir+"/") {
			points = append(points, m.Point)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		_ = unix.Unmount(p, unix.MNT_DETACH)
	}
}
