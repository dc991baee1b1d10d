package proxy

import (
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// OriginalDst returns the destination a DNATed TCP connection was sent to:
// netfilter conntrack's original tuple (getsockopt SOL_IP SO_ORIGINAL_DST,
// linux/netfilter_ipv4.h).
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	tc, ok := underlyingTCP(c)
	if !ok {
		return netip.AddrPort{}, errors.New("original destination: not a TCP connection")
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	var sa unix.RawSockaddrInet4
	var serr error
	err = rc.Control(func(fd uintptr) {
		size := uint32(unsafe.Sizeof(sa))
		_, _, errno := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.SOL_IP, unix.SO_ORIGINAL_DST,
			uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)), 0)
		if errno != 0 {
			serr = errno
		}
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, err
	}
	port := binary.BigEndian.Uint16((*[2]byte)(unsafe.Pointer(&sa.Port))[:])
	return netip.AddrPortFrom(netip.AddrFrom4(sa.Addr), port), nil
}
