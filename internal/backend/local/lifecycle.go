package local

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/bootid"
	"github.com/cubby-dev/cubby/internal/cgroups"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/runtime/runc"
)

// agentPath is where the agent binary appears inside every sandbox.
const agentPath = agentapi.AgentPath

func cgroupsPath(id string) string { return "/cubby/" + id }

// Create implements backend.Backend. Steps: id range, run dir and network (with
// the user namespace), writable layer + overlay, bundle, runtime start, agent
// health, agent init. Any failure unwinds all steps.
func (b *Backend) Create(ctx context.Context, req backend.CreateRequest) (inst backend.Instance, err error) {
	rt, err := b.runtimeFor(req.Runtime)
	if err != nil {
		return backend.Instance{}, err
	}
	dir := b.sandboxDir(req.SandboxID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return backend.Instance{}, fmt.Errorf("create sandbox dir: %w", err)
	}
	var undo undoStack
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	cleanupCtx := context.WithoutCancel(ctx)
	undo.push(func() { _ = os.RemoveAll(dir) })
	s := &sandbox{
		ID: req.SandboxID, Runtime: rt.Name(), Lower: req.RootfsDir, CPUCount: req.CPUCount,
		StartedAt: time.Now().UTC(), Init: req.Init, Volumes: req.Volumes,
		NoInternet: req.NoInternet || req.Egress.BlocksAll(), egress: req.Egress, Start: req.Start,
		Rootfs: filepath.Join(b.runDir(req.SandboxID), rootfs.RootfsName), Link: true,
	}
	var snap snapshotRecord
	if req.Snapshot != "" {
		if snap, err = b.useSnapshot(s, req.Snapshot); err != nil {
			return backend.Instance{}, err
		}
		undo.push(func() { b.dropLayers(cleanupCtx, s.ID) })
	}
	if err := b.claimVolumes(s, req.Volumes, &undo); err != nil {
		return backend.Instance{}, err
	}
	netnsPath, err := b.provision(ctx, s, &undo)
	if err != nil {
		return backend.Instance{}, err
	}
	if err := b.mountViews(s); err != nil {
		return backend.Instance{}, err
	}
	rootPath, err := b.rootfs.Prepare(ctx, b.disk(s), s.Lower, int64(req.DiskSizeMB)<<20)
	if err != nil {
		return backend.Instance{}, fmt.Errorf("prepare rootfs: %w", err)
	}
	undo.push(func() { _ = b.rootfs.Release(cleanupCtx, b.disk(s)) })
	if err := b.writeBundle(req, s, rt, rootPath, netnsPath); err != nil {
		return backend.Instance{}, err
	}
	if err := b.newBootID(s); err != nil {
		return backend.Instance{}, err
	}
	if err := b.saveState(s); err != nil {
		return backend.Instance{}, err
	}
	if err := b.openOutput(s); err != nil {
		return backend.Instance{}, err
	}
	undo.push(func() { b.closeOutput(s) })
	undo.push(func() { _ = rt.Kill(cleanupCtx, req.SandboxID) })
	if err := b.boot(ctx, s, rt, snap); err != nil {
		return backend.Instance{}, err
	}
	b.mu.Lock()
	b.sandboxes[s.ID] = s
	b.mu.Unlock()
	if err := b.watchExit(s); err != nil {
		b.log.Warn("cannot watch sandbox init; exits are noticed only by Kill", "sandbox", s.ID, "err", err)
	}
	return b.instance(s), nil
}

// boot runs the new sandbox s: restored from the memory image of snap when
// it is a full snapshot (its processes continue; the agent is re-initialised
// with s's own credential, hostname and settings, authenticated with the one
// it was captured with), otherwise started afresh, initialised and given its
// template's start command. The caller kills the container on error.
func (b *Backend) boot(ctx context.Context, s *sandbox, rt runtime.Runtime, snap snapshotRecord) error {
	token := ""
	if snap.full() {
		cp, ok := rt.(runtime.Checkpointer)
		if !ok {
			return fmt.Errorf("restore snapshot %s: runtime %s: %w", snap.ID, rt.Name(), backend.ErrNotSupported)
		}
		if err := b.restoreContainer(ctx, s, rt, cp, filepath.Join(b.snapshotDir(snap.ID), snapshotImage)); err != nil {
			return fmt.Errorf("snapshot %s: %w", snap.ID, err)
		}
		token = snap.AgentToken
	} else if err := b.startContainer(ctx, s, rt); err != nil {
		return err
	}
	if err := b.initAgent(ctx, s, token); err != nil {
		return fmt.Errorf("%w (sandbox output: %s)", err, b.outputTail(s.ID))
	}
	if snap.full() {
		return nil // the start command runs in the restored memory
	}
	return b.runStart(ctx, s)
}

// undoStack collects the undo steps of a multi-step operation; run executes
// them newest first.
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u undoStack) run() {
	for i := len(u) - 1; i >= 0; i-- {
		u[i]()
	}
}

// initAgent waits for the agent's /health and sends it s.Init, authenticated with
// token (the access token of an agent that already holds its persisted init, as
// after a restart from disk; "" for a fresh agent).
func (b *Backend) initAgent(ctx context.Context, s *sandbox, token string) error {
	readyCtx, cancel := context.WithTimeout(ctx, b.cfg.ReadyTimeout)
	defer cancel()
	c := b.agentClient(s, token)
	if err := c.WaitHealthy(readyCtx, 3*time.Millisecond); err != nil {
		return fmt.Errorf("wait for agent: %w", err)
	}
	init := b.initFor(s)
	init.Timestamp = time.Now().UTC()
	if err := c.Init(readyCtx, init); err != nil {
		return fmt.Errorf("init agent: %w", err)
	}
	return nil
}

// lockRunning returns sandbox id with its lock held, or ErrNotFound (unknown
// or killed meanwhile) or ErrPaused (wrapped as "<op> <id>: ..."), unlocked.
func (b *Backend) lockRunning(id, op string) (*sandbox, error) {
	s, err := b.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	switch {
	case !b.current(s):
		err = fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	case s.Paused:
		err = fmt.Errorf("%s %s: %w", op, id, backend.ErrPaused)
	}
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	return s, nil
}

// Reinit implements backend.Backend.
func (b *Backend) Reinit(ctx context.Context, id string, init agentapi.InitRequest) error {
	s, err := b.lockRunning(id, "reinit")
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if init.Timestamp.IsZero() {
		init.Timestamp = time.Now().UTC()
	}
	token := s.agentToken()
	prev := s.Init
	s.Init = init
	if err := b.agentClient(s, token).Init(ctx, b.initFor(s)); err != nil {
		s.Init = prev
		return fmt.Errorf("reinit agent of %s: %w", id, err)
	}
	s.Rekey = ""
	if err := b.saveState(s); err != nil {
		return fmt.Errorf("reinit %s: %w", id, err)
	}
	return nil
}

// SetInternetAccess implements backend.Backend.
func (b *Backend) SetInternetAccess(ctx context.Context, id string, allowed bool) error {
	s, err := b.lockRunning(id, "internet access of")
	if err != nil {
		return err
	}
	defer s.mu.Unlock()
	if err := b.net.SetInternetAccess(ctx, id, allowed); err != nil {
		return fmt.Errorf("internet access of %s: %w", id, err)
	}
	s.NoInternet = !allowed
	if err := b.saveState(s); err != nil {
		return fmt.Errorf("internet access of %s: %w", id, err)
	}
	return nil
}

// writeBundle writes the OCI bundle (config.json) and the per-sandbox files it binds.
func (b *Backend) writeBundle(req backend.CreateRequest, s *sandbox, rt runtime.Runtime, rootPath, netnsPath string) error {
	dir := b.sandboxDir(req.SandboxID)
	etc, err := writeEtcFiles(dir, req.SandboxID, s.Addr.String())
	if err != nil {
		return err
	}
	mounts := []specs.Mount{{
		Destination: agentPath, Type: "bind", Source: cmp.Or(s.Agent, b.cfg.AgentBinary),
		Options: []string{"bind", "ro", "nosuid", "nodev"},
	}}
	if req.CABundle != "" {
		mounts = append(mounts, specs.Mount{Destination: agentapi.CABundlePath, Type: "bind", Source: req.CABundle,
			Options: []string{"bind", "ro", "nosuid", "nodev", "noexec"}})
	}
	for dst, src := range etc {
		mounts = append(mounts, specs.Mount{Destination: dst, Type: "bind", Source: src, Options: []string{"bind", "ro"}})
	}
	mounts = append(mounts, b.volumeMounts(s)...)
	var hooks *specs.Hooks
	if s.Runtime == runc.Name {
		hooks = &specs.Hooks{CreateContainer: []specs.Hook{bootid.Hook(b.cfg.AgentBinary, b.bootIDFile(s), rootPath)}}
	}
	spec, err := oci.Build(oci.Options{
		ID:          req.SandboxID,
		RootfsDir:   rootPath,
		Hostname:    req.SandboxID,
		Args:        agentArgs(req),
		Env:         []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root", "LANG=C.UTF-8"},
		Cwd:         "/",
		NetNSPath:   netnsPath,
		CgroupsPath: cgroupsPath(req.SandboxID),
		CPUCount:    req.CPUCount,
		MemoryBytes: int64(req.MemoryMB) << 20,
		PidsLimit:   b.cfg.PidsLimit,
		Mounts:      mounts,
		UserNS:      b.userNS(s, rt),
		Hooks:       hooks,
	})
	if err != nil {
		return fmt.Errorf("build OCI spec: %w", err)
	}
	if err := oci.WriteBundle(b.bundleDir(s.ID), spec); err != nil {
		return fmt.Errorf("write bundle: %w", err)
	}
	return nil
}

// bootIDFile is the per-sandbox file the boot ID hook binds over the boot_id
// of a runc sandbox: next to its rootfs mount point, in the run dir its mapped
// root can reach (the hook runs in the sandbox's user namespace).
func (b *Backend) bootIDFile(s *sandbox) string {
	return filepath.Join(filepath.Dir(b.disk(s).Rootfs), "boot_id")
}

// newBootID gives the next start of a runc sandbox a fresh boot ID (runc
// containers see the host's procfs boot ID unless the bundle's hook binds the
// sandbox's own); a gVisor kernel makes its own on every boot.
func (b *Backend) newBootID(s *sandbox) error {
	if s.Runtime != runc.Name {
		return nil
	}
	if _, err := bootid.Write(b.bootIDFile(s)); err != nil {
		return fmt.Errorf("sandbox %s: %w", s.ID, err)
	}
	return nil
}

// agentArgs is the sandbox's init command line.
func agentArgs(req backend.CreateRequest) []string {
	return append([]string{agentPath, "agent"}, req.Boot.Args()...)
}

// writeEtcFiles writes hostname, hosts and resolv.conf for the sandbox and returns
// them keyed by their destination inside the sandbox.
func writeEtcFiles(dir, hostname, addr string) (map[string]string, error) {
	resolv, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		resolv = []byte("nameserver 1.1.1.1\n")
	}
	files := map[string][]byte{
		"/etc/hostname":    []byte(hostname + "\n"),
		"/etc/hosts":       fmt.Appendf(nil, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n%s\t%s\n", addr, hostname),
		"/etc/resolv.conf": resolv,
	}
	out := map[string]string{}
	for dst, data := range files {
		src := filepath.Join(dir, "etc-"+filepath.Base(dst))
		if err := os.WriteFile(src, data, 0o644); err != nil {
			return nil, fmt.Errorf("write %s: %w", dst, err)
		}
		out[dst] = src
	}
	return out, nil
}

// Kill implements backend.Backend: stop the container, then free network, rootfs and directory.
func (b *Backend) Kill(ctx context.Context, id string) error {
	s, err := b.get(id)
	if errors.Is(err, backend.ErrNotFound) {
		return b.destroy(ctx, id, "")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	b.closeOutput(s)
	if err := b.destroy(ctx, id, s.Runtime); err != nil {
		return err
	}
	b.mu.Lock()
	delete(b.sandboxes, id)
	b.mu.Unlock()
	return nil
}

// destroy removes every resource of sandbox id; it is idempotent. The id range
// is released last, and only once everything else is gone: a process that
// survived a failed kill must never share its ids with a new sandbox.
func (b *Backend) destroy(ctx context.Context, id, rtName string) error {
	st, stErr := b.loadState(id)
	if stErr != nil {
		st = &sandbox{ID: id, Rootfs: filepath.Join(b.runDir(id), rootfs.RootfsName)}
	}
	var errs []error
	for name, rt := range b.runtimes {
		if rtName != "" && name != rtName {
			continue
		}
		if err := rt.Kill(ctx, id); err != nil {
			errs = append(errs, fmt.Errorf("kill container: %w", err))
		}
	}
	b.forgetEgress(ctx, id)
	if err := b.detach(ctx, id); err != nil {
		errs = append(errs, fmt.Errorf("detach network: %w", err))
	}
	if err := b.rootfs.Release(ctx, b.disk(st)); err != nil {
		errs = append(errs, fmt.Errorf("release rootfs: %w", err))
	}
	viewsErr := b.dropVolumes(id)
	if viewsErr != nil {
		errs = append(errs, fmt.Errorf("volume views: %w", viewsErr))
	}
	for _, dir := range []string{b.runDir(id), b.sandboxDir(id)} {
		if viewsErr != nil && dir == b.sandboxDir(id) {
			continue // a volume view may still be mounted below it: never remove through it
		}
		if err := os.RemoveAll(dir); err != nil {
			errs = append(errs, fmt.Errorf("remove sandbox dir: %w", err))
		}
	}
	if len(errs) == 0 {
		if err := b.releaseIDs(id, st.IDs, stErr == nil); err != nil {
			errs = append(errs, fmt.Errorf("release id range: %w", err))
		}
		b.dropLayers(ctx, id)
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("destroy sandbox %s: %w", id, err)
	}
	return nil
}

// Stats implements backend.Backend from the sandbox's cgroup and writable layer.
func (b *Backend) Stats(_ context.Context, id string) (backend.Stats, error) {
	s, err := b.get(id)
	if err != nil {
		return backend.Stats{}, err
	}
	s.mu.Lock()
	stopped := s.Paused && s.PauseMode != backend.PauseMemory
	s.mu.Unlock()
	if stopped {
		return backend.Stats{}, fmt.Errorf("stats of %s: %w", id, backend.ErrPaused)
	}
	cg, err := cgroups.Read(cgroupsPath(id))
	if err != nil {
		return backend.Stats{}, fmt.Errorf("read cgroup of %s: %w", id, err)
	}
	now := time.Now()
	st := backend.Stats{
		Timestamp: now.UTC(), CPUCount: s.CPUCount, CPUUsageNs: cg.CPUUsageNs,
		MemUsed: cg.MemUsed, MemTotal: cg.MemLimit, MemCache: cg.MemCache,
	}
	s.mu.Lock()
	if prev := s.lastCPU; !prev.at.IsZero() && cg.CPUUsageNs >= prev.usage {
		if wall := now.Sub(prev.at); wall > 0 {
			st.CPUUsedPct = float64(cg.CPUUsageNs-prev.usage) / float64(wall.Nanoseconds()) * 100
		}
	}
	s.lastCPU = cpuReading{at: now, usage: cg.CPUUsageNs}
	s.mu.Unlock()
	if used, total, err := rootfs.Usage(b.sandboxDir(id)); err == nil {
		st.DiskUsed, st.DiskTotal = used, total
	}
	return st, nil
}
