package network

import (
	"errors"
	"fmt"
	"os"
	"runtime"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/nsfs"
)

// prepareNetnsDir makes dir exist and be a mount point with shared propagation,
// the layout ip-netns(8) uses: netns bind mounts made later then propagate to
// (and their unmounts from) mount namespaces cloned from the host, so no copy
// keeps a deleted sandbox's netns alive. A flock on dir serialises concurrent
// preparers, also across processes.
func prepareNetnsDir(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create netns dir %s: %w", dir, err)
	}
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open netns dir %s: %w", dir, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX); err != nil {
		return fmt.Errorf("lock netns dir %s: %w", dir, err)
	}
	defer unix.Flock(fd, unix.LOCK_UN)
	err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err := unix.Mount(dir, dir, "none", unix.MS_BIND|unix.MS_REC, ""); err != nil {
			return fmt.Errorf("bind netns dir %s onto itself: %w", dir, err)
		}
		err = unix.Mount("", dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	}
	if err != nil {
		return fmt.Errorf("make netns dir %s shared: %w", dir, err)
	}
	return nil
}

// newNetns is a freshly created named network namespace.
type newNetns struct {
	fd int             // open fd of the netns (O_CLOEXEC)
	nl *netlink.Handle // rtnetlink socket inside the netns
}

func (n newNetns) close() {
	if n.nl != nil {
		n.nl.Close()
	}
	if n.fd >= 0 {
		unix.Close(n.fd)
	}
}

// createNetns creates a network namespace with create (nil: unshare(2) on this
// process's behalf), bind-mounted at path (which must not exist), and returns
// an fd and an rtnetlink handle for it. The new netns gets sandboxNetnsSysctls
// (no IPv6 on interfaces added later, such as eth0; ICMP datagram sockets for
// every gid). The work runs on a dedicated, locked OS thread that exits
// afterwards (its netns no longer matches the process's).
func createNetns(path string, create NetnsFunc) (newNetns, error) {
	type result struct {
		ns  newNetns
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with this goroutine
		ns, err := enterNew(path, create)
		if err == nil {
			ns, err = configureNew(path)
		}
		ch <- result{ns, err}
	}()
	r := <-ch
	return r.ns, r.err
}

// enterNew makes the netns at path and moves the calling thread into it.
func enterNew(path string, create NetnsFunc) (newNetns, error) {
	ns := newNetns{fd: -1}
	if create != nil {
		if err := create(path); err != nil {
			return ns, err
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			err = unix.Setns(fd, unix.CLONE_NEWNET)
			unix.Close(fd)
		}
		if err != nil {
			removeNetns(path)
			return ns, fmt.Errorf("enter netns %s: %w", path, err)
		}
		return ns, nil
	}
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		return ns, fmt.Errorf("unshare netns: %w", err)
	}
	return ns, nsfs.Bind("/proc/thread-self/ns/net", path)
}

// configureNew writes sandboxNetnsSysctls in the calling thread's (new) netns
// and opens an fd and an rtnetlink handle for the netns at path; on error it
// removes the netns file.
func configureNew(path string) (newNetns, error) {
	ns := newNetns{fd: -1}
	err := writeSysctls(sandboxNetnsSysctls, "")
	if err == nil {
		ns.fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	}
	if err == nil {
		ns.nl, err = netlink.NewHandle(unix.NETLINK_ROUTE)
	}
	if err != nil {
		ns.close()
		removeNetns(path)
		return newNetns{fd: -1}, fmt.Errorf("set up netns %s: %w", path, err)
	}
	return ns, nil
}

// removeNetns unmounts and removes a named netns file. A missing or unmounted
// file is not an error. The namespace itself is freed by the kernel once no
// process or fd references it.
func removeNetns(path string) error { return nsfs.Remove(path) }

// isNetns reports whether path is a mounted network namespace file.
func isNetns(path string) error { return nsfs.Check(path, unix.CLONE_NEWNET) }

// nsHandle opens an rtnetlink handle inside the named netns at path.
func nsHandle(path string) (*netlink.Handle, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open netns %s: %w", path, err)
	}
	defer unix.Close(fd)
	h, err := netlink.NewHandleAt(netns.NsHandle(fd), unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink in netns %s: %w", path, err)
	}
	return h, nil
}
