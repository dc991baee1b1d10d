package egress

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/rpc"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/egress/proxy"
	"github.com/cubby-dev/cubby/internal/network"
	"golang.org/x/sys/unix"
)

// SetArgs is the argument of the child's Proxy.Set.
type SetArgs struct {
	ID     string
	Addr   netip.Addr // the sandbox's address
	Policy *policy.Policy
}

// SecretArgs is the argument of the server's Host.Secret.
type SecretArgs struct {
	Sandbox, Name string
}

// run keeps a child running on l (and rebinds after each exit) until Close.
func (s *Supervisor) run(l listeners, first chan<- error) {
	backoff := minBackoff
	for {
		began := time.Now()
		err := s.runOnce(l, first)
		first = nil
		if s.isClosed() {
			close(s.done)
			return
		}
		if time.Since(began) > healthyRun {
			backoff = minBackoff
		}
		s.log.Error("egress proxy exited; egress of steered sandboxes is refused until it is back", "err", err, "restart_in", backoff)
		if s.cfg.OnRestart != nil {
			s.cfg.OnRestart()
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, maxBackoff)
		l = s.rebind()
	}
}

// rebind binds the proxy's ports again, or new ones (told to nftables) when
// they are taken; it retries until it succeeds.
func (s *Supervisor) rebind() listeners {
	for wait := minBackoff; ; wait = min(2*wait, maxBackoff) {
		l, err := s.bind(s.ports)
		if err == nil {
			return l
		}
		if l, err = s.bind(network.EgressPorts{}); err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			err = s.cfg.Net.SetEgressPorts(ctx, l.ports())
			cancel()
			if err == nil {
				s.ports = l.ports()
				return l
			}
			l.close()
		}
		s.log.Error("egress proxy ports", "err", err)
		time.Sleep(wait)
	}
}

func (s *Supervisor) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// runOnce starts a child on l, hands it the state and lets it serve; it
// returns when the child exits. first, when not nil, gets the start outcome.
func (s *Supervisor) runOnce(l listeners, first chan<- error) error {
	report := func(err error) {
		if first != nil {
			first <- err
		}
	}
	cmd, client, err := s.startChild(l)
	l.close() // the child has its own copies: they close when it dies
	if err != nil {
		report(err)
		return err
	}
	if err := s.handOver(client); err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		report(err)
		return err
	}
	report(nil)
	s.log.Info("egress proxy serving", "pid", cmd.Process.Pid, "proxy_port", s.ports.Proxy, "dns_port", s.ports.DNS)
	err = cmd.Wait()
	s.mu.Lock()
	s.client = nil
	s.mu.Unlock()
	_ = client.Close()
	return fmt.Errorf("egress proxy process: %w", err)
}

// handOver pushes every sandbox's policy to a new child, then lets it serve
// and makes it the one Set talks to.
func (s *Supervisor) handOver(c *rpc.Client) error {
	s.mu.Lock()
	defer s.mu.Unlock() // Set waits: nothing is applied out of order
	ctx := context.Background()
	for _, args := range s.state {
		if err := call(ctx, c, "Proxy.Set", args); err != nil {
			return err
		}
	}
	if err := call(ctx, c, "Proxy.Serve", 0); err != nil {
		return err
	}
	s.client = c
	return nil
}

// startChild starts `cubby egress-proxy` with l and the two RPC socket pairs.
func (s *Supervisor) startChild(l listeners) (*exec.Cmd, *rpc.Client, error) {
	ctlParent, ctlChild, err := socketPair()
	if err != nil {
		return nil, nil, err
	}
	cbParent, cbChild, err := socketPair()
	if err != nil {
		ctlParent.Close()
		ctlChild.Close()
		return nil, nil, err
	}
	files, err := l.files()
	if err != nil {
		return nil, nil, errors.Join(err, ctlParent.Close(), ctlChild.Close(), cbParent.Close(), cbChild.Close())
	}
	cmd := exec.Command(s.cfg.Exe, s.childArgs()...)
	cmd.ExtraFiles = append(files, ctlChild, cbChild)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} // dies with the server
	err = s.spawn(cmd)
	for _, f := range cmd.ExtraFiles {
		_ = f.Close()
	}
	if err != nil {
		return nil, nil, errors.Join(fmt.Errorf("start egress proxy: %w", err), ctlParent.Close(), cbParent.Close())
	}
	s.mu.Lock()
	s.cmd = cmd
	s.mu.Unlock()
	srv := rpc.NewServer()
	if err := srv.RegisterName("Host", &Host{s: s}); err != nil {
		return nil, nil, err
	}
	go srv.ServeConn(cbParent)
	return cmd, rpc.NewClient(ctlParent), nil
}

// spawn starts cmd from a goroutine locked to its own OS thread for good:
// Pdeathsig fires when the thread that forked the child exits, and no other
// code of this process then runs on (and may end) that thread.
func (s *Supervisor) spawn(cmd *exec.Cmd) error {
	s.spawnOnce.Do(func() {
		s.spawnReq = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked
			for r := range s.spawnReq {
				r.done <- r.cmd.Start()
			}
		}()
	})
	done := make(chan error, 1)
	s.spawnReq <- spawnReq{cmd: cmd, done: done}
	return <-done
}

type spawnReq struct {
	cmd  *exec.Cmd
	done chan error
}

func caPath(dir, name string) string { return filepath.Join(dir, name) }

func (s *Supervisor) childArgs() []string {
	args := []string{ChildCommand, "--netns", s.netns, "--subnet", s.cfg.Subnet.String(),
		"--ca-cert", caPath(s.cfg.DataDir, CACertFile), "--ca-key", caPath(s.cfg.DataDir, CAKeyFile)}
	for _, r := range s.cfg.Resolvers {
		args = append(args, "--resolver", r.String())
	}
	if s.cfg.UpstreamCA != "" {
		args = append(args, "--upstream-ca", s.cfg.UpstreamCA)
	}
	return args
}

// files returns duplicates of l's descriptors, in the order the child expects.
func (l listeners) files() ([]*os.File, error) {
	var out []*os.File
	for _, c := range []interface{ File() (*os.File, error) }{l.proxy, l.dnsUDP, l.dnsTCP} {
		f, err := c.File()
		if err != nil {
			for _, o := range out {
				o.Close()
			}
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// socketPair returns a connected pair of Unix stream sockets, one as a
// net.Conn for this process and one as a file for the child.
func socketPair() (net.Conn, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	mine := os.NewFile(uintptr(fds[0]), "egress-rpc")
	defer mine.Close()
	c, err := net.FileConn(mine)
	if err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	return c, os.NewFile(uintptr(fds[1]), "egress-rpc-child"), nil
}

// Host is the service the child calls.
type Host struct{ s *Supervisor }

// Secret returns the value of a secret for a sandbox's rule.
func (h *Host) Secret(args SecretArgs, value *string) error {
	ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
	defer cancel()
	v, err := h.s.cfg.Secrets.SandboxSecret(ctx, args.Sandbox, args.Name)
	if err != nil {
		return err
	}
	*value = v
	return nil
}

// Events takes a batch of the child's decisions.
func (h *Host) Events(batch []proxy.Event, _ *struct{}) error {
	if h.s.cfg.Events != nil {
		for _, e := range batch {
			h.s.cfg.Events(e)
		}
	}
	return nil
}

// errUnknownSecret rebuilds policy.ErrUnknownSecret from an RPC error string.
func errUnknownSecret(err error) error {
	if err != nil && strings.Contains(err.Error(), policy.ErrUnknownSecret.Error()) {
		return fmt.Errorf("%s: %w", err.Error(), policy.ErrUnknownSecret)
	}
	return err
}
