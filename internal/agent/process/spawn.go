package process

import (
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"connectrpc.com/connect"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/cubby-dev/cubby/internal/agent/users"
	pb "github.com/cubby-dev/cubby/internal/envdpb/process"
)

// DefaultPath is the PATH every process starts with before sandbox and request
// environment variables are applied.
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// spawnSpec is a validated Start request.
type spawnSpec struct {
	user   *users.User
	config *pb.ProcessConfig // request config with cwd resolved
	env    []string
	pty    *pb.PTY
	stdin  bool
	tag    *string
}

// buildEnv layers PATH/HOME/USER/LOGNAME of u, then the sandbox-level
// variables, then the request's (docs/wire/envd.md). Later layers override earlier
// ones; the order is deterministic (base keys, then each layer's keys sorted).
func buildEnv(u *users.User, sandbox, request map[string]string) []string {
	var keys []string
	vals := map[string]string{}
	set := func(k, v string) {
		if _, ok := vals[k]; !ok {
			keys = append(keys, k)
		}
		vals[k] = v
	}
	set("PATH", DefaultPath)
	set("HOME", u.Home)
	set("USER", u.Name)
	set("LOGNAME", u.Name)
	for _, layer := range []map[string]string{sandbox, request} {
		for _, k := range slices.Sorted(maps.Keys(layer)) {
			set(k, layer[k])
		}
	}
	env := make([]string, 0, len(keys))
	for _, k := range keys {
		env = append(env, k+"="+vals[k])
	}
	return env
}

// resolveCwd returns the working directory for a process of u: the requested
// one (resolved like any envd path) which must be an existing directory, else
// the workdir when u can enter it, else u's home when it can, else "/".
func resolveCwd(u *users.User, requested, workdir string) (string, error) {
	if requested != "" {
		dir := u.Resolve(requested, workdir)
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return "", connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("cwd '%s' does not exist", dir))
		}
		return dir, nil
	}
	for _, dir := range []string{workdir, u.Home} {
		if dir != "" && canEnter(u, dir) {
			return filepath.Clean(dir), nil
		}
	}
	return "/", nil
}

// canEnter reports whether u may chdir into dir: dir is a directory and u has
// search permission on it and every ancestor (mode bits only, ACLs ignored).
func canEnter(u *users.User, dir string) bool {
	dir = filepath.Clean(dir)
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		return false
	}
	if u.UID == 0 {
		return true
	}
	for p := dir; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil || !mayExec(u, &st) {
			return false
		}
		if p == "/" {
			return true
		}
	}
}

func mayExec(u *users.User, st *unix.Stat_t) bool {
	switch {
	case st.Uid == u.UID:
		return st.Mode&0o100 != 0
	case st.Gid == u.GID || slices.Contains(u.Groups, st.Gid):
		return st.Mode&0o010 != 0
	default:
		return st.Mode&0o001 != 0
	}
}

// lookPath finds name in the PATH of env when it has no slash.
func lookPath(name string, env []string) (string, error) {
	if name == "" {
		return "", errors.New("empty cmd")
	}
	if strings.Contains(name, "/") {
		return name, nil
	}
	pathVal := DefaultPath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVal = v
		}
	}
	for _, dir := range filepath.SplitList(pathVal) {
		if dir == "" {
			dir = "."
		}
		cand := filepath.Join(dir, name)
		if fi, err := os.Stat(cand); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%s: %w", name, exec.ErrNotFound)
}

// credential returns the identity to run as, or nil when it is already ours
// (setgroups would fail for an unprivileged agent).
func credential(u *users.User) *syscall.Credential {
	if os.Geteuid() != 0 && uint32(os.Geteuid()) == u.UID && uint32(os.Getegid()) == u.GID {
		return nil
	}
	return &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: slices.Clone(u.Groups)}
}

// spawn starts the process of spec. Output is not read until supervise runs, so a
// subscriber attached in between misses nothing. Errors are connect errors.
func spawn(spec *spawnSpec, backlog int, log *slog.Logger) (*proc, error) {
	path, err := lookPath(spec.config.GetCmd(), spec.env)
	if err != nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start process: %w", err))
	}
	cmd := &exec.Cmd{
		Path:        path,
		Args:        append([]string{spec.config.GetCmd()}, spec.config.GetArgs()...),
		Env:         spec.env,
		Dir:         spec.config.GetCwd(),
		SysProcAttr: &syscall.SysProcAttr{Credential: credential(spec.user)},
	}
	p := &proc{
		tag: spec.tag, config: spec.config, cmd: cmd, log: log,
		out: newHub(backlog), done: make(chan struct{}),
	}
	if spec.pty != nil {
		err = p.startPTY(spec.user, spec.pty.GetSize())
	} else {
		err = p.startPipes(spec.stdin)
	}
	if err != nil {
		return nil, startError(err)
	}
	p.pid = uint32(cmd.Process.Pid)
	return p, nil
}

func startError(err error) error {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("start process: %w", err))
	case errors.Is(err, fs.ErrPermission):
		return connect.NewError(connect.CodePermissionDenied, fmt.Errorf("start process: %w", err))
	default:
		return connect.NewError(connect.CodeInternal, fmt.Errorf("start process: %w", err))
	}
}

// startPipes runs the command in its own process group with stdout/stderr
// pipes and, when withStdin, a stdin pipe (else /dev/null).
func (p *proc) startPipes(withStdin bool) (err error) {
	var child, parent []*os.File
	defer func() {
		closeAll(child)
		if err != nil {
			closeAll(parent)
		}
	}()
	pipe := func() (r, w *os.File, err error) {
		r, w, err = os.Pipe()
		if err != nil {
			return nil, nil, fmt.Errorf("create pipe: %w", err)
		}
		return r, w, nil
	}
	outR, outW, err := pipe()
	if err != nil {
		return err
	}
	parent, child = append(parent, outR), append(child, outW)
	errR, errW, err := pipe()
	if err != nil {
		return err
	}
	parent, child = append(parent, errR), append(child, errW)
	p.cmd.Stdout, p.cmd.Stderr = outW, errW
	if withStdin {
		inR, inW, err := pipe()
		if err != nil {
			return err
		}
		parent, child = append(parent, inW), append(child, inR)
		p.cmd.Stdin, p.stdin = inR, inW
	}
	p.cmd.SysProcAttr.Setpgid = true
	if err := p.cmd.Start(); err != nil {
		return fmt.Errorf("exec %s: %w", p.cmd.Path, err)
	}
	resetOOMScore(p.cmd.Process.Pid)
	p.outputs = []*os.File{outR, errR}
	return nil
}

// startPTY runs the command as a session leader (so its process group is its
// pid) with a new PTY of size as its controlling terminal and stdio.
func (p *proc) startPTY(u *users.User, size *pb.PTY_Size) error {
	master, tty, err := pty.Open()
	if err != nil {
		return fmt.Errorf("open pty: %w", err)
	}
	defer tty.Close()
	if size.GetCols() > 0 && size.GetRows() > 0 {
		ws := &pty.Winsize{Cols: uint16(size.GetCols()), Rows: uint16(size.GetRows())}
		if err := pty.Setsize(master, ws); err != nil {
			master.Close()
			return fmt.Errorf("size pty: %w", err)
		}
	}
	if os.Geteuid() == 0 {
		_ = tty.Chown(int(u.UID), int(u.GID)) // best effort: lets the user reopen its tty
	}
	p.cmd.Stdin, p.cmd.Stdout, p.cmd.Stderr = tty, tty, tty
	p.cmd.SysProcAttr.Setsid = true
	p.cmd.SysProcAttr.Setctty = true
	p.cmd.SysProcAttr.Ctty = 0
	if err := p.cmd.Start(); err != nil {
		master.Close()
		return fmt.Errorf("exec %s: %w", p.cmd.Path, err)
	}
	resetOOMScore(p.cmd.Process.Pid)
	p.pty = master
	p.outputs = []*os.File{master}
	return nil
}

func closeAll(fs []*os.File) {
	for _, f := range fs {
		_ = f.Close()
	}
}

// listedConfig is the config reported by List: the request's, with cwd resolved.
func listedConfig(cfg *pb.ProcessConfig, cwd string) *pb.ProcessConfig {
	c := proto.CloneOf(cfg)
	if c == nil {
		c = &pb.ProcessConfig{}
	}
	c.Cwd = proto.String(cwd)
	return c
}

// userOOMScoreAdj is the oom_score_adj of every process the agent starts: when the
// sandbox runs out of memory, the memcg OOM killer then picks user processes (and
// their children, which inherit it) before the agent, so the sandbox stays reachable.
// Raising a score needs no privilege (lowering the agent's would need CAP_SYS_RESOURCE).
const userOOMScoreAdj = "500"

// resetOOMScore applies userOOMScoreAdj to a started process, right after exec and
// before a shell gets to run user code.
func resetOOMScore(pid int) {
	_ = os.WriteFile(fmt.Sprintf("/proc/%d/oom_score_adj", pid), []byte(userOOMScoreAdj), 0)
}
