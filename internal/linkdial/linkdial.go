// Package linkdial dials connections pinned to one network interface with
// SO_BINDTODEVICE (socket(7)): the host reaches a sandbox only over that
// sandbox's own host link (see internal/network), so a connection meant for
// one sandbox can never be routed to another, even when its address has
// meanwhile been handed to someone else, and a link that is gone fails the
// dial (ENODEV) instead of falling back to another route.
package linkdial

import (
	"context"
	"fmt"
	"net"
	"syscall"

	"golang.org/x/sys/unix"
)

// Dialer returns a copy of base (nil = a zero net.Dialer) whose sockets are
// bound to interface iface before they connect. An empty iface returns base
// unchanged: the dial follows the routing table (used where no host link
// exists, such as unit tests with loopback upstreams). Binding needs
// CAP_NET_RAW on kernels before 5.7; a failed bind fails the dial with an
// error naming the interface.
func Dialer(base *net.Dialer, iface string) *net.Dialer {
	d := &net.Dialer{}
	if base != nil {
		*d = *base
	}
	if iface == "" {
		return d
	}
	inner, plain := d.ControlContext, d.Control
	d.Control = nil
	d.ControlContext = func(ctx context.Context, network, address string, c syscall.RawConn) error {
		var err error
		switch {
		case inner != nil:
			err = inner(ctx, network, address, c)
		case plain != nil:
			err = plain(network, address, c)
		}
		if err != nil {
			return err
		}
		return Bind(c, iface)
	}
	return d
}

// Bind sets SO_BINDTODEVICE to iface on the socket behind c. Errors: the
// interface name is too long or the kernel refuses it (ENODEV: no such link).
func Bind(c syscall.RawConn, iface string) error {
	var serr error
	err := c.Control(func(fd uintptr) {
		serr = unix.BindToDevice(int(fd), iface)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return fmt.Errorf("bind socket to %s: %w", iface, err)
	}
	return nil
}

// DialContext connects to address ("host:port") over network ("tcp", "tcp4")
// through interface iface (see Dialer).
func DialContext(ctx context.Context, iface, network, address string) (net.Conn, error) {
	return Dialer(nil, iface).DialContext(ctx, network, address)
}
