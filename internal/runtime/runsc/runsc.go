// Package runsc implements runtime.Runtime and runtime.Checkpointer by driving
// gVisor's runsc CLI (OCI runtime command line: create, start, state, list, delete,
// pause, resume, plus checkpoint and restore) with a private state root. It runs the
// same OCI bundles as the runc package (docs/isolation.md, "runc and gVisor").
//
// With the netstack network (Options.Network "sandbox") runsc moves the addresses of
// the interfaces of the container's network namespace into the sandbox and deletes
// them from the namespace. The Runtime records them in the bundle at Start (see
// NetConfig) and puts them back once the sandbox is gone (Kill, Checkpoint) and
// before Restore, so the namespace routes again for the next sandbox.
package runsc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/ocicli"
)

// PidFileName is the file runsc writes the sandbox pid into, inside the bundle.
const PidFileName = "init.pid"

// Defaults of Options (docs/isolation.md, "runc and gVisor": systrap is the
// fast platform on the hosts Cubby runs on, kvm hangs on paravirtualised ones;
// overlay2 "none" makes writes land in the bundle's root filesystem on the host,
// the sandbox's disk).
const (
	DefaultPlatform = "systrap"
	DefaultNetwork  = "sandbox"
	DefaultOverlay  = "none"
)

// cleanupTimeout bounds the clean-up after a failed Start or Restore.
const cleanupTimeout = 10 * time.Second

// Options are runsc's global flags. Zero values select the defaults.
type Options struct {
	Platform string // --platform: "systrap" (default) or "ptrace"; never "kvm" on PVM hosts
	Network  string // --network: "sandbox" (netstack, default), "none" or "host"
	Overlay  string // --overlay2: "none" (default: writes go to the host rootfs) or e.g. "root:memory"
	// Debug adds --debug and writes runsc's debug logs, one file per command and
	// process, to DebugLogDir (default: <stateRoot>/debug/).
	Debug       bool
	DebugLogDir string
}

// Runtime drives one runsc binary with one state root. It is safe for concurrent
// use on distinct container IDs.
type Runtime struct {
	cli  ocicli.CLI
	root string
	opts Options
	log  *slog.Logger
}

var (
	_ runtime.Runtime      = (*Runtime)(nil)
	_ runtime.Checkpointer = (*Runtime)(nil)
)

// New returns a Runtime that runs binary (e.g. "bin/runsc", built by `make runsc`)
// with `--root stateRoot` (a directory runsc creates; preferably on tmpfs such as
// /run) and the global flags of opts.
func New(binary, stateRoot string, opts Options, log *slog.Logger) *Runtime {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if opts.Platform == "" {
		opts.Platform = DefaultPlatform
	}
	if opts.Network == "" {
		opts.Network = DefaultNetwork
	}
	if opts.Overlay == "" {
		opts.Overlay = DefaultOverlay
	}
	if opts.Debug && opts.DebugLogDir == "" {
		opts.DebugLogDir = filepath.Join(stateRoot, "debug")
	}
	cli := ocicli.CLI{Name: "runsc", Binary: binary, Flags: globalFlags(stateRoot, opts),
		NotFound: "loading container: file does not exist"}
	return &Runtime{cli: cli, root: stateRoot, opts: opts, log: log}
}

// Name returns "runsc".
func (r *Runtime) Name() string { return "runsc" }

// State parses `runsc state id`. Pid is the host pid of the sandbox process (the
// gVisor kernel running the container), 0 when stopped. Unknown IDs return an error
// wrapping runtime.ErrNotFound.
func (r *Runtime) State(ctx context.Context, id string) (runtime.State, error) {
	return r.cli.State(ctx, id)
}

// List parses `runsc list --format json`: every container in the state root.
func (r *Runtime) List(ctx context.Context) ([]runtime.State, error) {
	return r.cli.List(ctx)
}

// globalFlags are the flags given to every runsc command.
func globalFlags(root string, opts Options) []string {
	f := []string{"--root", root, "--platform=" + opts.Platform, "--network=" + opts.Network,
		"--overlay2=" + opts.Overlay}
	if opts.Debug {
		f = append(f, "--debug", "--debug-log="+opts.DebugLogDir+"/")
	}
	return f
}

// Start runs `runsc create --bundle bundle --pid-file bundle/init.pid id` with the
// container's stdin on /dev/null and its stdout and stderr on output, then
// `runsc start id`. Before that it records the network configuration of the spec's
// network namespace in the bundle (see NetConfig). On error the half-created
// container is removed and the error carries runsc's message.
func (r *Runtime) Start(ctx context.Context, id, bundle string, output *os.File) error {
	if err := r.cli.CheckID(id); err != nil {
		return err
	}
	if err := r.saveNet(bundle); err != nil {
		return fmt.Errorf("runsc start %s: %w", id, err)
	}
	err := r.cli.Launch(ctx, id, output, "create", "--bundle", bundle, "--pid-file", filepath.Join(bundle, PidFileName), id)
	if err == nil {
		_, err = r.cli.Run(ctx, "start", id)
	}
	if err != nil {
		r.cleanup(ctx, id, bundle)
		return err
	}
	r.log.Debug("container started", "id", id, "bundle", bundle)
	return nil
}

// cleanup removes a container left by a failed Start or Restore, ignoring errors
// (logged), and puts the network namespace's addresses back.
func (r *Runtime) cleanup(ctx context.Context, id, bundle string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := r.Kill(ctx, id); err != nil {
		r.log.Warn("clean up failed container", "id", id, "err", err)
	}
	r.restoreNet(bundle)
}

// Kill destroys the container with `runsc delete --force` (SIGKILL to the sandbox
// and gofer, wait for them, remove the cgroups and state: one exec of ~30 ms, where
// `runsc kill` followed by waiting for the sandbox to exit takes ~1.5 s here), waits
// on a pidfd until the sandbox process is gone and puts the network namespace's
// addresses back. Works on running, paused and stopped containers. Unknown IDs
// return nil.
func (r *Runtime) Kill(ctx context.Context, id string) error {
	st, found, err := r.cli.Lookup(ctx, id)
	if err != nil {
		return fmt.Errorf("runsc kill %s: %w", id, err)
	}
	if !found {
		return nil
	}
	if err := r.destroy(ctx, st); err != nil {
		return err
	}
	r.restoreNet(st.Bundle)
	return nil
}

// destroy runs `runsc delete --force` and waits until the sandbox process has
// exited.
func (r *Runtime) destroy(ctx context.Context, st runtime.State) error {
	pidfd, err := ocicli.OpenPidfd(st.Pid)
	if err != nil {
		return fmt.Errorf("runsc kill %s: pidfd_open %d: %w", st.ID, st.Pid, err)
	}
	if pidfd >= 0 {
		defer unix.Close(pidfd)
	}
	if _, err := r.cli.Run(ctx, "delete", "--force", st.ID); err != nil && !errors.Is(err, runtime.ErrNotFound) {
		return fmt.Errorf("runsc kill %s: %w", st.ID, err)
	}
	if pidfd >= 0 {
		if err := ocicli.WaitPidfd(ctx, pidfd); err != nil {
			return fmt.Errorf("runsc kill %s: wait for sandbox pid %d: %w", st.ID, st.Pid, err)
		}
	}
	return nil
}

// Pause stops every task of the container inside the sandbox with `runsc pause`
// (the gVisor kernel stops scheduling them; memory stays allocated).
func (r *Runtime) Pause(ctx context.Context, id string) error {
	return r.cli.OnContainer(ctx, "pause", id)
}

// Resume continues a paused container with `runsc resume`.
func (r *Runtime) Resume(ctx context.Context, id string) error {
	return r.cli.OnContainer(ctx, "resume", id)
}

// ReleaseRoot unmounts the "null-netns" bind mount runsc keeps in the state root
// (the empty network namespace its gofers share; created again by the next
// Start). Call it when the state root is about to be removed, e.g. at shutdown or
// after a test; running containers are not affected. It returns nil when nothing
// is mounted.
func (r *Runtime) ReleaseRoot() error {
	path := filepath.Join(r.root, "null-netns")
	for range 64 { // concurrent runsc invocations may stack mounts
		err := unix.Unmount(path, unix.MNT_DETACH)
		if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("runsc: unmount %s: %w", path, err)
		}
	}
	return fmt.Errorf("runsc: %s still mounted after 64 unmounts", path)
}

// CreatesUserns reports true: runsc cannot setns(2) into an existing user
// namespace (a multithreaded Go process), so the spec names the mapping and
// runsc creates the namespace; its sandbox and gofer processes then run as the
// mapped root, an unprivileged host uid, while the gVisor kernel implements the
// per-user limits of the processes inside.
func (r *Runtime) CreatesUserns() bool { return true }

var _ runtime.UsernsCreator = (*Runtime)(nil)
