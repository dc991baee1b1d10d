package linkdial

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/testenv/testnetns"
)

func TestDialerBindsToInterface(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SO_BINDTODEVICE needs CAP_NET_RAW on older kernels; run as root")
	}
	ln := testnetns.ClosingListener(t, "127.0.0.1:0")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var bound string
	base := &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { bound, _ = unix.GetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE) })
	}}
	// The base's Control runs first, before the bind.
	c, err := Dialer(base, "lo").DialContext(ctx, "tcp4", ln.String())
	if err != nil {
		t.Fatalf("dial bound to lo: %v", err)
	}
	c.Close()
	if bound != "" {
		t.Fatalf("base Control saw the socket already bound to %q", bound)
	}
	_, err = DialContext(ctx, "cbnolink0", "tcp4", ln.String())
	if !errors.Is(err, unix.ENODEV) {
		t.Fatalf("dial bound to a missing link: %v, want ENODEV", err)
	}
	if c, err = DialContext(ctx, "", "tcp4", ln.String()); err != nil {
		t.Fatalf("unbound dial: %v", err)
	}
	c.Close()
}
