// Package bootid gives every boot of a sandbox its own Linux boot ID, the
// random UUID a kernel makes at boot and shows in
// /proc/sys/kernel/random/boot_id. Clients detect reboots through it: E2B
// sandboxes show a new one after a filesystem-only pause and resume, which
// boots the sandbox again. Under runc a container sees the host's procfs
// value, so the backend writes a fresh ID for each container start (Write) and
// has runc bind it over the container's boot_id while the container is being
// created (an OCI createContainer hook, Hook and RunHook); gVisor's kernel
// makes its own per boot.
package bootid

import (
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Path is the boot ID file of Linux's procfs (proc(5)).
const Path = "/proc/sys/kernel/random/boot_id"

// HookCommand is the `cubby` subcommand (with its argument) that runs RunHook.
var HookCommand = []string{"oci-hook", "boot-id"}

// New returns a random boot ID: a version 4 UUID in lower-case hex, as the
// kernel formats boot_id (without the newline).
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// Write stores a new boot ID (New, then a newline, mode 0444) in file,
// replacing the previous one atomically, and returns it. Errors wrap the file
// system's.
func Write(file string) (string, error) {
	id := New()
	tmp, err := os.CreateTemp(filepath.Dir(file), ".boot_id-*")
	if err != nil {
		return "", fmt.Errorf("write boot id: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(id + "\n"); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write boot id: %w", err)
	}
	if err := tmp.Chmod(0o444); err != nil {
		tmp.Close()
		return "", fmt.Errorf("write boot id: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return "", fmt.Errorf("write boot id: %w", err)
	}
	if err := os.Rename(tmp.Name(), file); err != nil {
		return "", fmt.Errorf("write boot id: %w", err)
	}
	return id, nil
}

// Hook returns the OCI createContainer hook that runs `exe oci-hook boot-id
// file root` (RunHook) for a container whose root filesystem is mounted at root
// (OCI runtime spec, config.md "POSIX-platform Hooks": createContainer hooks run
// in the container's namespaces, its user namespace included, after its mounts
// are set up and before pivot_root). file and root must be reachable by the
// container's root: with a user namespace, that is a host uid without access to
// root-only directories.
func Hook(exe, file, root string) specs.Hook {
	args := append([]string{exe}, HookCommand...)
	return specs.Hook{Path: exe, Args: append(args, file, root)}
}

// RunHook binds file read-only over the boot_id of the container being
// created, whose root filesystem is mounted at root. The target must be on
// procfs (the container's /proc is mounted by then) and is opened without
// following symbolic links, so a root filesystem cannot redirect the bind
// elsewhere. Errors name the step.
func RunHook(file, root string) error {
	if !filepath.IsAbs(root) || !filepath.IsAbs(file) {
		return fmt.Errorf("boot id hook: %q and %q must be absolute paths", file, root)
	}
	target := filepath.Join(root, Path)
	fd, err := openNoSymlinks(root, Path)
	if err != nil {
		return fmt.Errorf("boot id hook: open %s: %w", target, err)
	}
	defer unix.Close(fd)
	var fs unix.Statfs_t
	if err := unix.Fstatfs(fd, &fs); err != nil {
		return fmt.Errorf("boot id hook: statfs %s: %w", target, err)
	}
	if fs.Type != unix.PROC_SUPER_MAGIC {
		return fmt.Errorf("boot id hook: %s is not on procfs", target)
	}
	dst := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(file, dst, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("boot id hook: bind %s over %s: %w", file, target, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("boot id hook: make %s read-only: %w", target, err)
	}
	return nil
}

// openNoSymlinks opens root/rel as an O_PATH descriptor, refusing any symbolic
// link on the way (a root filesystem the sandbox wrote cannot point the bind
// elsewhere).
func openNoSymlinks(root, rel string) (int, error) {
	dir, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(dir)
	how := unix.OpenHow{Flags: unix.O_PATH | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	return unix.Openat2(dir, strings.TrimPrefix(rel, "/"), &how)
}
