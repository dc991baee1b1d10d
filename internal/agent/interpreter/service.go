// Package interpreter is the E2B-compatible code-interpreter service (port
// 49999; docs/wire/code-interpreter.md): code contexts backed by Jupyter kernels (Python, Node.js
// for JavaScript/TypeScript, Java, R, Deno, any installed kernelspec) or a
// native persistent bash, the POST /execute NDJSON stream and the /contexts API.
// As on E2B, the default contexts exist before the /contexts API answers and
// kernels run as root unless a context names another user.
package interpreter

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cubby-dev/cubby/internal/agent/interpreter/zygote"
	"github.com/cubby-dev/cubby/internal/agent/jupyter"
	"github.com/cubby-dev/cubby/internal/agent/kernels/python"
	"github.com/cubby-dev/cubby/internal/agentapi/execapi"
	"github.com/cubby-dev/cubby/internal/cgroups"
)

// DefaultPythonExtension is the IPython extension module loaded into Python
// kernels (charts/DataFrames formatters shipped by the code-interpreter template).
const DefaultPythonExtension = python.ModuleName

// DefaultUser is the account kernels run as in a sandbox: root, as E2B runs its
// Jupyter server (a sandbox's root is confined by the sandbox).
const DefaultUser = "root"

// Config configures a Service. Zero values take the defaults given per field.
type Config struct {
	// Env returns the sandbox-level environment variables (the agent's /init
	// envVars); nil means none.
	Env func() map[string]string
	// User is the account kernels run as unless a context names another
	// ("" = the service's own user).
	User string
	// LookupUser resolves the accounts User and contexts name in the
	// sandbox's user database (the agent passes its own lookup); nil = kernels
	// run only as the service's own user, and naming another fails.
	LookupUser func(name string) (Account, error)
	// Workdir is the default context cwd ("" = the user's home).
	Workdir string
	// Log receives diagnostics (default slog.Default()).
	Log *slog.Logger
	// PythonExtension is the IPython extension module loaded into Python
	// kernels (default DefaultPythonExtension); a missing module only logs a
	// warning in the kernel. "-" disables it.
	PythonExtension string
	// PythonPath is prepended to PYTHONPATH of Python kernels (where the
	// extension module lives).
	PythonPath []string
	// KernelSpecDirs is the kernelspec search path (default
	// jupyter.KernelSpecDirs(<user home>, $JUPYTER_PATH)).
	KernelSpecDirs []string
	// DefaultLanguages are pre-started by StartDefaults (default python,
	// javascript); languages not installed are skipped.
	DefaultLanguages []string
	// ExecutionTimeout bounds one cell; 0 = no limit (clients time out and
	// disconnect, which interrupts the cell).
	ExecutionTimeout time.Duration
	// KeepaliveInterval is the idle time before a keepalive line (default 5 s).
	KeepaliveInterval time.Duration
	// InterruptGrace bounds the wait for an interrupted cell before the kernel
	// is killed and restarted (default 3 s).
	InterruptGrace time.Duration
	// StartTimeout bounds a kernel start (default 60 s).
	StartTimeout time.Duration
	// RuntimeDir holds per-kernel connection files and sockets (default os.TempDir()).
	RuntimeDir string
	// KernelLogDir receives one capped <context id>.log per kernel and the
	// Python fork server's zygote.log ("" = discard).
	KernelLogDir string
	// NoZygote turns the Python fork server off: every Python kernel then
	// starts cold (~0.6 s instead of ~0.1 s, BenchmarkContextStartColdVsZygote).
	// With it on, the server starts with the first Python context (normally
	// the default one, in StartDefaults) and new contexts and restarts fork
	// from it; when it is unavailable kernels start cold.
	NoZygote bool
	// ZygotePreload lists modules the fork server imports besides ipykernel
	// and PythonExtension, so that kernels start with them loaded (nil =
	// zygote.DefaultPreload(): numpy, pandas, matplotlib, matplotlib.pyplot,
	// each if installed; empty = none). Unless EagerPreload is set they are
	// imported after the first Python context is ready: that kernel imports
	// them itself when its code does; later contexts fork with them loaded.
	ZygotePreload []string
	// EagerPreload makes the fork server import ZygotePreload before it forks
	// the first kernel (~0.6 s more before the first Python context answers,
	// but the default context starts with the data stack loaded).
	EagerPreload bool
	// ZygoteExclude lists modules the fork server hides while it imports
	// ipykernel, so forked kernels run without them (nil =
	// zygote.DefaultExclude(): debugpy and jedi, which only serve the Jupyter
	// debug_request and complete_request that Cubby's API never sends; ~0.2 s
	// of the first Python context's start; empty = none). Kernels can still
	// import them; cold kernels are unaffected.
	ZygoteExclude []string
	// ParallelDefaults starts every default language at once, as before; by
	// default StartDefaults starts Python first and the other languages once
	// Python's context is ready (or failed), so they do not compete for CPU
	// with the context a first runCode most likely needs.
	ParallelDefaults bool
}

// codeContext is a context with its engine and its one-execution-at-a-time lock.
type codeContext struct {
	execapi.Context
	seq     int
	rank    int // position in the list: the default contexts first (defaultRank), then the rest
	eng     engine
	sem     chan struct{}
	deleted atomic.Bool
	used    atomic.Bool // lock was taken: the kernel may hold user state
}

// lock waits for the context's turn; false when ctx ended first.
func (c *codeContext) lock(ctx context.Context) bool {
	select {
	case c.sem <- struct{}{}:
		c.used.Store(true)
		return true
	case <-ctx.Done():
		return false
	}
}

// lockUnused takes the context's turn only if it is free and the context has
// never been locked (so its kernel holds no user state); it does not mark the
// context used.
func (c *codeContext) lockUnused() bool {
	if c.used.Load() {
		return false
	}
	select {
	case c.sem <- struct{}{}:
	default:
		return false
	}
	if c.used.Load() {
		<-c.sem
		return false
	}
	return true
}

func (c *codeContext) unlock() { <-c.sem }

// Service is the code-interpreter service. Create it with New; serve Handler.
type Service struct {
	cfg      Config
	log      *slog.Logger
	acct     account
	specDirs []string

	mu       sync.Mutex
	contexts map[string]*codeContext
	defaults map[string]*codeContext  // language → default context
	creating map[string]chan struct{} // language → default being created
	seq      int
	closed   bool
	bg       sync.WaitGroup
	fork     *forkServer        // nil with Config.NoZygote
	oom      jupyter.OOMCounter // memory cgroup of the service (and its kernels); nil = unknown

	defaultsDone chan struct{} // closed when StartDefaults has returned
	defaultsOnce sync.Once
	created      chan struct{} // closed once every default context is created (or failed)
	createdOnce  sync.Once
}

// Account is a user of the sandbox kernels can run as, as Config.LookupUser
// resolves it from the sandbox's user database.
type Account struct {
	Name   string
	UID    uint32
	GID    uint32
	Home   string
	Groups []uint32 // supplementary group IDs
}

// account is the user kernels run as.
type account struct {
	name, home string
	cred       *syscall.Credential
}

// resolveAccount resolves name with lookup ("" = the service's own user).
func resolveAccount(lookup func(string) (Account, error), name string) (account, error) {
	if name == "" {
		u, err := user.Current()
		if err != nil {
			return account{}, fmt.Errorf("current user: %w", err)
		}
		return account{name: u.Username, home: u.HomeDir}, nil
	}
	if lookup == nil {
		return account{}, fmt.Errorf("user %q: no user lookup configured", name)
	}
	u, err := lookup(name)
	if err != nil {
		return account{}, err
	}
	a := account{name: u.Name, home: u.Home}
	if int(u.UID) != os.Getuid() || int(u.GID) != os.Getgid() {
		a.cred = &syscall.Credential{Uid: u.UID, Gid: u.GID, Groups: u.Groups}
	}
	return a, nil
}

// New returns a Service for cfg. It fails when cfg.User does not exist.
func New(cfg Config) (*Service, error) {
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	if cfg.PythonExtension == "" {
		cfg.PythonExtension = DefaultPythonExtension
	}
	if cfg.DefaultLanguages == nil {
		cfg.DefaultLanguages = []string{LangPython, LangJavaScript}
	}
	if cfg.KeepaliveInterval <= 0 {
		cfg.KeepaliveInterval = 5 * time.Second
	}
	if cfg.InterruptGrace <= 0 {
		cfg.InterruptGrace = 3 * time.Second
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 60 * time.Second
	}
	acct, err := resolveAccount(cfg.LookupUser, cfg.User)
	if err != nil {
		return nil, fmt.Errorf("interpreter user: %w", err)
	}
	if cfg.Workdir == "" {
		cfg.Workdir = acct.home
	}
	if cfg.KernelSpecDirs == nil {
		cfg.KernelSpecDirs = jupyter.KernelSpecDirs(acct.home, os.Getenv("JUPYTER_PATH"))
	}
	s := &Service{cfg: cfg, log: cfg.Log, acct: acct, specDirs: cfg.KernelSpecDirs,
		contexts: map[string]*codeContext{}, defaults: map[string]*codeContext{},
		creating: map[string]chan struct{}{}, defaultsDone: make(chan struct{}), created: make(chan struct{})}
	if len(cfg.DefaultLanguages) == 0 {
		s.markCreated() // no default contexts to wait for
	}
	if !cfg.NoZygote {
		s.fork = newForkServer(s.zygoteConfig, cfg.StartTimeout, cfg.Log)
	}
	if cg, err := cgroups.MemoryOf(0); err == nil {
		s.oom = cg
	} else {
		cfg.Log.Debug("memory cgroup not found; OOM kills are reported as plain kernel deaths", "err", err)
	}
	return s, nil
}

// zygoteConfig is the fork server's configuration for python: the kernels'
// user, sandbox env and import path; the extension and Config.ZygotePreload
// preloaded.
func (s *Service) zygoteConfig(python string) zygote.Config {
	preload := s.cfg.ZygotePreload
	if preload == nil {
		preload = zygote.DefaultPreload()
	}
	early, late := []string{}, append([]string(nil), preload...)
	if s.cfg.EagerPreload {
		early, late = late, nil
	}
	if s.cfg.PythonExtension != "-" {
		early = append(early, s.cfg.PythonExtension)
	}
	exclude := s.cfg.ZygoteExclude
	if exclude == nil {
		exclude = zygote.DefaultExclude()
	}
	env := s.sandboxEnv(nil)
	c := zygote.Config{Python: python, Preload: early, Late: late, Exclude: exclude,
		Env: kernelEnv(s.acct, s.kernelPath(env), env, s.pythonEnv(env)), Dir: "/", Credential: s.acct.cred, RuntimeDir: s.cfg.RuntimeDir,
		Log: s.log.With("svc", "zygote")}
	if s.cfg.KernelLogDir != "" {
		c.LogPath = filepath.Join(s.cfg.KernelLogDir, "zygote.log")
	}
	return c
}

// StartDefaults creates the default context of every Config.DefaultLanguages
// entry that is installed, so the first runCode does not pay for a kernel
// start: Python first, then the other languages concurrently with the fork
// server's late preload (all at once with Config.ParallelDefaults). The
// /contexts API waits until every default context exists (E2B's server creates
// them before it serves). It returns once all are started (or failed), with the
// start errors of installed languages.
func (s *Service) StartDefaults(ctx context.Context) error {
	defer s.defaultsOnce.Do(func() { close(s.defaultsDone) })
	defer s.markCreated()
	t0 := time.Now()
	langs := make([]string, len(s.cfg.DefaultLanguages))
	for i, l := range s.cfg.DefaultLanguages {
		langs[i] = NormalizeLanguage(l)
	}
	errs := make([]error, len(langs))
	start := func(i int) {
		_, err := s.defaultContext(ctx, langs[i], s.sandboxEnv(nil))
		switch {
		case errors.Is(err, ErrUnknownLanguage):
			s.log.Info("default context skipped", "language", langs[i], "err", err)
			err = nil
		case err == nil:
			s.log.Info("default context ready", "language", langs[i], "ms", time.Since(t0).Milliseconds())
		}
		errs[i] = err
	}
	var contexts, preload sync.WaitGroup
	first := -1
	if !s.cfg.ParallelDefaults {
		first = slices.Index(langs, LangPython)
	}
	if first >= 0 {
		start(first)
	}
	for i := range langs {
		if i != first {
			contexts.Go(func() { start(i) })
		}
	}
	if s.fork != nil && !s.cfg.EagerPreload {
		preload.Go(func() {
			if s.fork.preloadLate(ctx) {
				s.refork(ctx, LangPython)
			}
		})
	}
	contexts.Wait()
	s.markCreated()
	preload.Wait()
	return errors.Join(errs...)
}

// markCreated opens the /contexts API: the default contexts exist (or failed).
func (s *Service) markCreated() { s.createdOnce.Do(func() { close(s.created) }) }

// DefaultsCreated returns a channel closed once every default context exists
// (or failed to start), by StartDefaults, Close, or New when
// Config.DefaultLanguages is empty; the /contexts API waits for it.
func (s *Service) DefaultsCreated() <-chan struct{} { return s.created }

// refork restarts the default context of language (Python) through the fork
// server if nothing has run in it yet, so that its kernel shares the modules
// the server imported after the context started (the late preload). A request
// arriving meanwhile waits for the restart (~0.1 s).
func (s *Service) refork(ctx context.Context, language string) {
	s.mu.Lock()
	c := s.defaults[language]
	s.mu.Unlock()
	if c == nil || !c.lockUnused() {
		return
	}
	defer c.unlock()
	if c.deleted.Load() {
		return
	}
	t0 := time.Now()
	if err := c.eng.restart(ctx); err != nil {
		s.log.Warn("default context: restart after the late preload", "language", language, "err", err)
		return
	}
	s.log.Info("default context restarted with the late preload", "language", language, "ms", time.Since(t0).Milliseconds())
}

// DefaultsStarted returns a channel closed once StartDefaults has returned:
// every installed default language then has a live context (or failed to
// start, which StartDefaults reported).
func (s *Service) DefaultsStarted() <-chan struct{} { return s.defaultsDone }

// Close kills every kernel and waits for background restarts. Idempotent.
func (s *Service) Close() error {
	s.markCreated()
	s.mu.Lock()
	s.closed = true
	all := make([]*codeContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		all = append(all, c)
	}
	s.contexts, s.defaults = map[string]*codeContext{}, map[string]*codeContext{}
	s.mu.Unlock()
	for _, c := range all {
		c.deleted.Store(true)
		c.eng.close()
	}
	s.bg.Wait()
	if s.fork != nil {
		s.fork.close()
	}
	return nil
}

// sandboxEnv returns the sandbox-level env from Config.Env (nil when unset).
func (s *Service) sandboxEnv(_ *http.Request) map[string]string {
	if s.cfg.Env != nil {
		return s.cfg.Env()
	}
	return nil
}

func newContextID() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// lookup returns a live context by id.
func (s *Service) lookup(id string) *codeContext {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.contexts[id]
}

// defaultContext returns (creating once, concurrently safe) the default context
// of language.
func (s *Service) defaultContext(ctx context.Context, language string, env map[string]string) (*codeContext, error) {
	for {
		s.mu.Lock()
		if c := s.defaults[language]; c != nil {
			s.mu.Unlock()
			return c, nil
		}
		wait, busy := s.creating[language]
		if !busy {
			done := make(chan struct{})
			s.creating[language] = done
			s.mu.Unlock()
			c, err := s.createContext(ctx, contextSpec{language: language, env: env, isDefault: true})
			s.mu.Lock()
			delete(s.creating, language)
			s.mu.Unlock()
			close(done)
			return c, err
		}
		s.mu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// contextSpec is what a new context is made of.
type contextSpec struct {
	language  string            // normalised
	cwd       string            // "" = Config.Workdir
	user      string            // "" = Config.User
	env       map[string]string // sandbox env
	isDefault bool              // becomes the language's default context
}

// createContext starts an engine for sp and registers it.
func (s *Service) createContext(ctx context.Context, sp contextSpec) (*codeContext, error) {
	lang, err := findLanguage(sp.language, s.specDirs, s.kernelPath(sp.env))
	if err != nil {
		return nil, err
	}
	acct := s.acct
	if sp.user != "" && sp.user != s.acct.name {
		if acct, err = resolveAccount(s.cfg.LookupUser, sp.user); err != nil {
			return nil, fmt.Errorf("%w: user %q: %w", errBadRequest, sp.user, err)
		}
	}
	cwd := sp.cwd
	if cwd == "" {
		cwd = s.cfg.Workdir
	}
	if st, err := os.Stat(cwd); err != nil || !st.IsDir() {
		return nil, fmt.Errorf("%w: cwd %q is not a directory", errBadRequest, cwd)
	}
	id := newContextID()
	ctx, cancel := context.WithTimeout(ctx, max(s.cfg.StartTimeout, lang.start))
	defer cancel()
	eng, err := s.startEngine(ctx, lang, acct, id, cwd, sp.env)
	if err != nil {
		return nil, fmt.Errorf("start %s context: %w", sp.language, err)
	}
	if lang.python && s.fork != nil {
		s.fork.kernelStarted()
	}
	c := &codeContext{Context: execapi.Context{ID: id, Language: sp.language, Cwd: cwd}, eng: eng, sem: make(chan struct{}, 1),
		rank: len(s.cfg.DefaultLanguages)}
	if sp.isDefault {
		c.rank = s.defaultRank(sp.language)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		eng.close()
		return nil, errors.New("interpreter service closed")
	}
	s.seq++
	c.seq = s.seq
	s.contexts[id] = c
	if sp.isDefault {
		s.defaults[sp.language] = c
	}
	return c, nil
}

var errBadRequest = errors.New("bad request")

// kernelPath is the PATH kernels get (sandbox env, else the service's own).
func (s *Service) kernelPath(env map[string]string) string {
	if p := env["PATH"]; p != "" {
		return p
	}
	if p := os.Getenv("PATH"); p != "" {
		return p
	}
	return "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
}

// kernelEnv builds the environment of a kernel of acct: login basics (PATH
// path), the sandbox env, then the language's own entries.
func kernelEnv(acct account, path string, env map[string]string, extra []string) []string {
	m := map[string]string{"PATH": path, "HOME": acct.home, "USER": acct.name,
		"LOGNAME": acct.name, "SHELL": "/bin/bash", "LANG": "C.UTF-8"}
	maps.Copy(m, env)
	for _, kv := range extra {
		if k, v, ok := strings.Cut(kv, "="); ok {
			m[k] = v
		}
	}
	out := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		out = append(out, k+"="+m[k])
	}
	return out
}

// startEngine launches the language's kernel or bash for a new context of acct.
func (s *Service) startEngine(ctx context.Context, lang *language, acct account, id, cwd string, env map[string]string) (engine, error) {
	path := s.kernelPath(env)
	if lang.bash {
		bin, err := lookPathIn("bash", path)
		if err != nil {
			return nil, err
		}
		e := &bashEngine{bin: bin, dir: cwd, env: kernelEnv(acct, path, env, []string{"TERM=dumb"}), cred: acct.cred,
			grace: s.cfg.InterruptGrace, log: s.log, spawnEnv: maps.Clone(env)}
		if _, err := e.shell(ctx); err != nil {
			return nil, err
		}
		return e, nil
	}
	extra := append([]string(nil), lang.extraEnv...)
	var args []string
	var launcher jupyter.Launcher
	if lang.python {
		args = s.pythonArgs()
		extra = append(extra, s.pythonEnv(env)...)
		if s.fork != nil {
			launcher = s.fork
		}
	}
	o := jupyter.Options{Dir: cwd, Env: kernelEnv(acct, path, env, extra), Credential: acct.cred, ExtraArgs: args,
		RuntimeDir: s.cfg.RuntimeDir, InterruptGrace: s.cfg.InterruptGrace, SettleDelay: lang.settle,
		HandshakeTimeout: lang.handshake,
		Launcher:         launcher, OOM: s.oom, Log: s.log.With("context", id)}
	if lang.tcp {
		o.Transport = jupyter.TCP
	}
	if s.cfg.KernelLogDir != "" {
		o.LogPath = filepath.Join(s.cfg.KernelLogDir, id+".log")
		o.LogAttrs = []slog.Attr{slog.String("context", id)}
	}
	k, err := jupyter.Start(ctx, lang.spec, o)
	if err != nil {
		return nil, err
	}
	return &kernelEngine{k: k, env: lang.env, spawnEnv: maps.Clone(env), pid: k.Pid(), applied: maps.Clone(env)}, nil
}

// pythonEnv returns the env entries Python kernels get on top of the sandbox
// env: PYTHONPATH with Config.PythonPath first (none when it is empty).
func (s *Service) pythonEnv(env map[string]string) []string {
	if len(s.cfg.PythonPath) == 0 {
		return nil
	}
	pp := strings.Join(s.cfg.PythonPath, string(filepath.ListSeparator))
	if cur := env["PYTHONPATH"]; cur != "" {
		pp += string(filepath.ListSeparator) + cur
	}
	return []string{"PYTHONPATH=" + pp}
}

// pythonArgs are ipykernel flags: plain tracebacks (E2B's NoColor), no shared
// history database, no sequence truncation, and the display extension.
func (s *Service) pythonArgs() []string {
	args := []string{"--InteractiveShell.colors=NoColor", "--HistoryManager.enabled=False",
		"--PlainTextFormatter.max_seq_length=0"}
	if s.cfg.PythonExtension != "-" {
		args = append(args, "--IPKernelApp.extra_extensions="+s.cfg.PythonExtension)
	}
	return args
}

// defaultRank is the list position of language's default context: Python's
// first (it is started first, and E2B lists python, javascript), then the other
// languages of Config.DefaultLanguages in their order.
func (s *Service) defaultRank(language string) int {
	if language == LangPython {
		return -1
	}
	i := slices.IndexFunc(s.cfg.DefaultLanguages, func(l string) bool { return NormalizeLanguage(l) == language })
	if i < 0 {
		return len(s.cfg.DefaultLanguages)
	}
	return i
}

// list returns the live contexts: the default contexts first (defaultRank),
// then the others in creation order.
func (s *Service) list() []execapi.Context {
	s.mu.Lock()
	all := make([]*codeContext, 0, len(s.contexts))
	for _, c := range s.contexts {
		all = append(all, c)
	}
	s.mu.Unlock()
	sort.Slice(all, func(i, j int) bool {
		if all[i].rank != all[j].rank {
			return all[i].rank < all[j].rank
		}
		return all[i].seq < all[j].seq
	})
	out := make([]execapi.Context, len(all))
	for i, c := range all {
		out[i] = c.Context
	}
	return out
}

// remove unregisters and closes a context; false when unknown.
func (s *Service) remove(id string) bool {
	s.mu.Lock()
	c := s.contexts[id]
	if c != nil {
		delete(s.contexts, id)
		if s.defaults[c.Language] == c {
			delete(s.defaults, c.Language)
		}
	}
	s.mu.Unlock()
	if c == nil {
		return false
	}
	c.deleted.Store(true)
	c.eng.close()
	return true
}
