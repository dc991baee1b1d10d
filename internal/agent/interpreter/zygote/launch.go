package zygote

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/agent/jupyter"
)

// replyTimeout bounds the wait for the server's answer once a request is sent
// (it answers right after fork()).
const replyTimeout = 10 * time.Second

// request is the JSON line sent to the server (see zygote.py).
type request struct {
	ConnectionFile string            `json:"connection_file"`
	Args           []string          `json:"args"`
	Cwd            string            `json:"cwd"`
	Env            map[string]string `json:"env"`
	UID            *uint32           `json:"uid"`
	GID            *uint32           `json:"gid"`
	Groups         []uint32          `json:"groups"`
}

type reply struct {
	Pid   int    `json:"pid"`
	Error string `json:"error"`
}

// Launch forks a kernel for req (implements jupyter.Launcher). req.Argv must be
// `<Config.Python> -m ipykernel_launcher|ipykernel <args>` (else ErrUnsupported);
// the child gets req's connection file, cwd, env, credential and output. The
// returned process is watched through a pidfd (the server, not the caller, is
// its parent). Errors wrap ErrUnavailable when the server is gone.
func (s *Server) Launch(ctx context.Context, req jupyter.LaunchRequest) (jupyter.Process, error) {
	args, err := s.kernelArgs(req.Argv)
	if err != nil {
		return nil, err
	}
	if !s.Alive() {
		return nil, fmt.Errorf("fork kernel: %w (%v)", ErrUnavailable, s.exitError())
	}
	line, err := encodeRequest(req, args)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", s.socket)
	if err != nil {
		return nil, fmt.Errorf("fork kernel: %w: %w", ErrUnavailable, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if err := send(ctx, conn, line, req.Output); err != nil {
		return nil, fmt.Errorf("fork kernel: send request: %w", err)
	}
	p, err := receive(conn)
	if err != nil {
		return nil, fmt.Errorf("fork kernel: %w", err)
	}
	if ctx.Err() != nil {
		p.kill()
		return nil, fmt.Errorf("fork kernel: %w", ctx.Err())
	}
	return p, nil
}

// PreloadLate asks the server to import Config.Late now and waits until it has
// (or ctx ends; the imports go on regardless). It returns the time each import
// took, in milliseconds. Forks requested meanwhile are served between two
// imports. Calling it again only waits. Errors wrap ErrUnavailable when the
// server is gone.
func (s *Server) PreloadLate(ctx context.Context) (map[string]float64, error) {
	if !s.Alive() {
		return nil, fmt.Errorf("preload: %w (%v)", ErrUnavailable, s.exitError())
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", s.socket)
	if err != nil {
		return nil, fmt.Errorf("preload: %w: %w", ErrUnavailable, err)
	}
	conn := c.(*net.UnixConn)
	defer conn.Close()
	if err := send(ctx, conn, []byte(`{"op":"preload"}`+"\n"), nil); err != nil {
		return nil, fmt.Errorf("preload: send request: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetReadDeadline(time.Now()) })
	defer stop()
	line, err := bufio.NewReader(conn).ReadBytes('\n')
	if err != nil {
		if ctx.Err() != nil {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("preload: read reply: %w", err)
	}
	var r struct {
		OK       bool               `json:"ok"`
		ImportMs map[string]float64 `json:"import_ms"`
		Error    string             `json:"error"`
	}
	if err := json.Unmarshal(line, &r); err != nil {
		return nil, fmt.Errorf("preload: decode reply %q: %w", line, err)
	}
	if !r.OK {
		return nil, fmt.Errorf("preload: %s", r.Error)
	}
	return r.ImportMs, nil
}

// kernelArgs returns the ipykernel arguments of argv, or ErrUnsupported.
func (s *Server) kernelArgs(argv []string) ([]string, error) {
	if len(argv) < 3 || argv[0] != s.cfg.Python || argv[1] != "-m" ||
		(argv[2] != "ipykernel_launcher" && argv[2] != "ipykernel") {
		return nil, fmt.Errorf("%w: argv %q", ErrUnsupported, argv)
	}
	return argv[3:], nil
}

func encodeRequest(req jupyter.LaunchRequest, args []string) ([]byte, error) {
	r := request{ConnectionFile: req.ConnectionFile, Args: args, Cwd: req.Dir, Env: map[string]string{}}
	if r.Cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return nil, fmt.Errorf("fork kernel: cwd: %w", err)
		}
		r.Cwd = wd
	}
	env := req.Env
	if env == nil {
		env = os.Environ()
	}
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			r.Env[k] = v
		}
	}
	if c := req.Credential; c != nil {
		r.UID, r.GID = &c.Uid, &c.Gid
		if !c.NoSetGroups {
			r.Groups = append([]uint32{}, c.Groups...)
		}
	}
	b, err := json.Marshal(r)
	if err != nil {
		return nil, fmt.Errorf("fork kernel: encode request: %w", err)
	}
	return append(b, '\n'), nil
}

// send writes the request line with out's fd attached (SCM_RIGHTS).
func send(ctx context.Context, conn *net.UnixConn, line []byte, out *os.File) error {
	deadline := time.Now().Add(replyTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	conn.SetWriteDeadline(deadline)
	var oob []byte
	if out != nil {
		oob = unix.UnixRights(int(out.Fd()))
	}
	n, _, err := conn.WriteMsgUnix(line, oob, nil)
	if err != nil || n == len(line) {
		return err
	}
	// Only a short write continues: even an empty write is a syscall, and it
	// fails with EPIPE once a server that answered at once has hung up.
	_, err = conn.Write(line[n:])
	return err
}

// receive reads the reply line and the pidfd that comes with it.
func receive(conn *net.UnixConn) (*process, error) {
	conn.SetReadDeadline(time.Now().Add(replyTimeout))
	var buf []byte
	var fds []int
	chunk, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4*4))
	for !bytes.HasSuffix(buf, []byte("\n")) {
		n, oobn, _, _, err := conn.ReadMsgUnix(chunk, oob)
		if got, perr := parseRights(oob[:oobn]); perr == nil {
			fds = append(fds, got...)
		}
		buf = append(buf, chunk[:n]...)
		if err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("read reply: %w", err)
		}
		if n == 0 {
			closeAll(fds)
			return nil, errors.New("read reply: connection closed")
		}
	}
	var r reply
	if err := json.Unmarshal(buf, &r); err != nil {
		closeAll(fds)
		return nil, fmt.Errorf("decode reply %q: %w", buf, err)
	}
	if r.Error != "" || r.Pid <= 0 || len(fds) != 1 {
		closeAll(fds)
		if r.Error == "" {
			r.Error = fmt.Sprintf("reply %q came with %d fds", buf, len(fds))
			if r.Pid > 0 {
				syscall.Kill(r.Pid, syscall.SIGKILL)
			}
		}
		return nil, errors.New(r.Error)
	}
	return watchPidfd(r.Pid, fds[0]), nil
}

func parseRights(oob []byte) ([]int, error) {
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	for i := range msgs {
		if got, err := unix.ParseUnixRights(&msgs[i]); err == nil {
			fds = append(fds, got...)
		}
	}
	return fds, nil
}

func closeAll(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
