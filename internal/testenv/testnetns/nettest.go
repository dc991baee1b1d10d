// Package testnetns helps tests that play the hosts around sandbox networks: it
// runs code inside a named network namespace and keeps a UDP sink there that
// records what arrives and from which source address (a stand-in for a host
// on the internet, to see what leaves the host and under which address).
package testnetns

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// InNetns runs fn on a locked OS thread switched into the network namespace
// at path; the thread is discarded afterwards. Sockets fn creates belong to
// that netns and keep working from any goroutine. Errors: opening or joining
// the netns, or fn's.
func InNetns(path string, fn func() error) error {
	ch := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread's netns was changed
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			ch <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			ch <- fmt.Errorf("setns %s: %w", path, err)
			return
		}
		ch <- fn()
	}()
	return <-ch
}

// UDPSink is a UDP socket in some netns recording every datagram it gets.
type UDPSink struct {
	Addr netip.AddrPort // where it listens
	got  chan [2]string // payload, source address
}

// ListenUDP opens a UDPSink on addr (port chosen by the kernel) inside the
// netns at nsPath; it is closed when tb ends.
func ListenUDP(tb testing.TB, nsPath string, addr netip.Addr) *UDPSink {
	tb.Helper()
	var pc net.PacketConn
	err := InNetns(nsPath, func() (err error) {
		pc, err = net.ListenPacket("udp4", netip.AddrPortFrom(addr, 0).String())
		return err
	})
	if err != nil {
		tb.Fatalf("listen on %s in %s: %v", addr, nsPath, err)
	}
	tb.Cleanup(func() { pc.Close() })
	s := &UDPSink{Addr: netip.MustParseAddrPort(pc.LocalAddr().String()), got: make(chan [2]string, 64)}
	go func() {
		buf := make([]byte, 1500)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			s.got <- [2]string{string(buf[:n]), from.(*net.UDPAddr).IP.String()}
		}
	}()
	return s
}

// Await collects what arrives, payload -> source address, until a datagram
// with payload want has arrived (or max has passed) and then for grace more:
// want is sent after (or with) the datagrams under test and proves the path
// delivered, so grace only has to cover reordering, not a slow first packet.
func (s *UDPSink) Await(want string, max, grace time.Duration) map[string]string {
	got := map[string]string{}
	deadline := time.After(max)
	var after <-chan time.Time
	for {
		select {
		case d := <-s.got:
			got[d[0]] = d[1]
			if d[0] == want && after == nil {
				after = time.After(grace)
			}
		case <-deadline:
			return got
		case <-after:
			return got
		}
	}
}

// WaitUp waits (at most 10 s) until host interface ifname reports operstate
// "up": a veth drops what it is given until the kernel's link watcher has
// activated it, which can take a second on a loaded host.
func WaitUp(tb testing.TB, ifname string) {
	tb.Helper()
	path := filepath.Join("/sys/class/net", ifname, "operstate")
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "up" {
			return
		}
	}
	tb.Fatalf("%s did not come up", ifname)
}

// ClosingListener listens for TCP over IPv4 on addr (e.g. "127.0.0.1:0") in
// the current network namespace and closes every connection it accepts, until
// the test ends. It returns the address it listens on.
func ClosingListener(tb testing.TB, addr string) *net.TCPAddr {
	tb.Helper()
	ln, err := net.Listen("tcp4", addr)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	return ln.Addr().(*net.TCPAddr)
}
