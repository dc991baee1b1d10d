// Package testpostgres starts a real PostgreSQL server for tests: Debian's server
// binaries (the postgresql package), initdb'd into a fresh directory and
// started as the "postgres" user, listening only on a Unix socket in that
// directory (no TCP port, so servers of parallel tests never collide). Tests
// create one database each with CreateDB and stop the server with Stop.
package testpostgres

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// binGlob finds Debian's PostgreSQL server binaries (any major version).
const binGlob = "/usr/lib/postgresql/*/bin"

// osUser is the account the server runs as: PostgreSQL refuses to run as root.
const osUser = "postgres"

// startTimeout bounds the wait for a started server to accept connections.
const startTimeout = 2 * time.Minute

// Server is one running PostgreSQL server.
type Server struct {
	Dir string // data directory and socket directory's parent
	bin string
	cmd *exec.Cmd
	ids atomic.Int64
}

// SkipReason returns why a server cannot start here ("" when it can): no
// PostgreSQL server binaries, no postgres account, or not root.
func SkipReason() string {
	if _, err := binDir(); err != nil {
		return err.Error()
	}
	if _, err := user.Lookup(osUser); err != nil {
		return "no " + osUser + " account (apt-get install postgresql)"
	}
	if os.Geteuid() != 0 {
		return "starting PostgreSQL as the postgres user needs root"
	}
	return ""
}

func binDir() (string, error) {
	dirs, _ := filepath.Glob(binGlob)
	sort.Strings(dirs)
	for i := len(dirs) - 1; i >= 0; i-- {
		if _, err := os.Stat(filepath.Join(dirs[i], "initdb")); err == nil {
			return dirs[i], nil
		}
	}
	return "", errors.New("no PostgreSQL server binaries in " + binGlob + " (apt-get install postgresql)")
}

// Start initdb's a new cluster in a fresh directory under parent ("" = the
// system temp dir) and starts it. Errors: SkipReason's, or initdb/postgres
// failing (with their output).
func Start(parent string) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	u, err := user.Lookup(osUser)
	if err != nil {
		return nil, fmt.Errorf("look up %s: %w", osUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	dir, err := os.MkdirTemp(parent, "cubby-pg-")
	if err != nil {
		return nil, fmt.Errorf("postgres dir: %w", err)
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("postgres dir: %w", err)
	}
	s := &Server{Dir: dir, bin: bin}
	cred := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	initdb := exec.Command(filepath.Join(bin, "initdb"), "-D", s.dataDir(), "-U", "postgres", "--auth=trust",
		"-E", "UTF8", "--locale=C", "--no-sync")
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	if out, err := initdb.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w: %s", err, out)
	}
	if err := s.start(cred); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

func (s *Server) dataDir() string { return filepath.Join(s.Dir, "data") }

// start runs postgres on the socket in s.Dir and waits until it answers.
func (s *Server) start(cred *syscall.Credential) error {
	logf, err := os.OpenFile(filepath.Join(s.Dir, "postgres.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("postgres log: %w", err)
	}
	defer logf.Close()
	cmd := exec.Command(filepath.Join(s.bin, "postgres"), "-D", s.dataDir(), "-k", s.Dir,
		"-c", "listen_addresses=", "-c", "fsync=off", "-c", "synchronous_commit=off",
		"-c", "full_page_writes=off", "-c", "max_connections=300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Setpgid: true}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start postgres: %w", err)
	}
	s.cmd = cmd
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for {
		c, err := pgx.Connect(ctx, s.DSN("postgres"))
		if err == nil {
			_ = c.Close(ctx)
			return nil
		}
		select {
		case <-ctx.Done():
			s.Stop()
			log, _ := os.ReadFile(filepath.Join(s.Dir, "postgres.log"))
			return fmt.Errorf("postgres did not answer: %w (log: %s)", err, log)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// DSN returns the connection URL of database db on this server.
func (s *Server) DSN(db string) string {
	q := url.Values{"host": {s.Dir}, "user": {"postgres"}, "sslmode": {"disable"}}
	return (&url.URL{Scheme: "postgres", Path: "/" + db, RawQuery: q.Encode()}).String()
}

// CreateDB creates a new, empty database and returns its DSN.
func (s *Server) CreateDB(ctx context.Context) (string, error) {
	name := fmt.Sprintf("cubby_%d_%d", os.Getpid(), s.ids.Add(1))
	c, err := pgx.Connect(ctx, s.DSN("postgres"))
	if err != nil {
		return "", fmt.Errorf("connect postgres: %w", err)
	}
	defer c.Close(ctx)
	if _, err := c.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", fmt.Errorf("create database %s: %w", name, err)
	}
	return s.DSN(name), nil
}

// Stop stops the server (fast shutdown, then SIGKILL after 10 s) and leaves
// its directory for Restart; Remove deletes it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGINT)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-done
	}
	s.cmd = nil
}

// Restart starts a stopped server again on the same data and socket.
func (s *Server) Restart() error {
	u, err := user.Lookup(osUser)
	if err != nil {
		return fmt.Errorf("look up %s: %w", osUser, err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	return s.start(&syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)})
}

// Remove stops the server and deletes its directory.
func (s *Server) Remove() {
	s.Stop()
	_ = os.RemoveAll(s.Dir)
}
