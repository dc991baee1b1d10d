// Package local is the single-host backend: each sandbox is an OCI container
// (runc by default) whose root filesystem is an overlay of a template tree and a
// size-limited on-disk layer, in its own network namespace on a host bridge, with
// cgroup limits, and with the Cubby agent as its init process.
//
// What a sandbox directory (Config.Dir/<id>) holds, and what bounds it whatever
// the sandbox does:
//   - sandbox.json, bundle/ (config.json, init.pid, runsc's network record),
//     etc-hostname, etc-hosts, etc-resolv.conf: written by the server from the
//     create request; a few KiB.
//   - disk.img: the sandbox's disk, created at its size (sparse); layer/ (and
//     the rootfs in the run dir, below) are mounts of it, so everything the
//     sandbox writes to files lands inside it.
//   - userns: the bind mount of its user namespace (with one).
//   - output.fifo: the container's stdout and stderr (no data on disk; the pipe
//     buffer is kernel memory of at most fs.pipe-max-size); output.log and
//     output.log.1: what the server drained from it, 1 MiB each at most
//     (package sandboxlog).
//   - checkpoint/: runsc's image while paused with its memory, bounded by the
//     sandbox's memory limit (its files stay in disk.img).
//
// No host file is handed to the container: its stdio is the FIFO, and the
// runtime's own log (ocicli.Launch) a pipe closed once the container started.
//
// With user namespaces (Config.Userns, the default of `cubby serve`) each sandbox
// also has its own range of 65536 host uids and gids, leased host-wide
// (userns.Allocator, owner: the sandbox directory) and recorded in its
// sandbox.json, so a restarted server re-claims it. Its user namespace is owned
// by the range's first host id (not root), so per-user kernel counts are charged
// to the sandbox; it is created with the sandbox's network namespace (which it
// owns) and kept in <Dir>/<id>/userns. The template and the disk are idmapped
// into the sandbox's rootfs (package rootfs). A sandbox keeps the mode it was
// created with.
//
// Host layout of sandbox id:
//
//	<Dir>/<id>/          0700 root: what is listed above
//	<RunDir>/            0711 root
//	<RunDir>/<id>/       0700, owned by the sandbox's mapped root (host root without
//	                     a user namespace): only that uid, which the runtime's init
//	                     runs as, can reach
//	<RunDir>/<id>/rootfs the overlay mount: the sandbox's root filesystem
package local

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cubby-dev/cubby/internal/agentapi"
	"github.com/cubby-dev/cubby/internal/agentclient"
	"github.com/cubby-dev/cubby/internal/backend"
	"github.com/cubby-dev/cubby/internal/egress/policy"
	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/sandboxlog"
	"github.com/cubby-dev/cubby/internal/userns"
)

// Config configures the local backend.
type Config struct {
	// Dir holds one directory per sandbox (bundle, disk image, output FIFO and
	// capped log, state).
	Dir string
	// RunDir holds one directory per sandbox with its rootfs mount point (see the
	// package doc); its parents must be searchable by every uid (the mapped
	// roots). Default <Dir>/../run, which suits only sandboxes without a user
	// namespace when Dir's parents are private.
	RunDir string
	// SnapshotDir holds the snapshots (see Snapshot); default <Dir>/../snapshots.
	SnapshotDir string
	// VolumeDir holds the volumes (see CreateVolume); default <Dir>/../volumes.
	VolumeDir string
	// Userns gives new sandboxes their own user namespace; IDs and Namespaces
	// must then be set (they are also needed to resume or re-adopt sandboxes
	// created with one).
	Userns bool
	// IDs leases the sandboxes' id ranges (userns.Allocator).
	IDs IDAllocator
	// Namespaces creates the sandboxes' user and network namespaces
	// (userns.Creator).
	Namespaces NamespaceCreator
	// AgentBinary is the host path of the static cubby binary bind-mounted read-only
	// into every sandbox as its init process.
	AgentBinary string
	// PidsLimit caps the processes of one sandbox (fork-bomb protection); default 4096.
	PidsLimit int64
	// ReadyTimeout bounds how long Create waits for the agent's /health; default 30 s.
	ReadyTimeout time.Duration
	// Egress is the egress proxy sandboxes with domain rules, header rules or
	// an upstream proxy are steered to; nil = such policies are refused
	// (ErrNotSupported), address rules still apply.
	Egress EgressProxy
}

// IDAllocator leases host id ranges to sandboxes; owner is the sandbox
// directory. Implemented by *userns.Allocator.
type IDAllocator interface {
	Claim(owner string, prefer userns.Range) (userns.Range, error)
	Release(owner string, r userns.Range) error
	ReleaseOwner(owner string) error
}

// NamespaceCreator creates a user namespace for r owned by r's first host id,
// and a network namespace it owns, bind-mounted at usernsPath and netnsPath.
// Implemented by *userns.Creator.
type NamespaceCreator interface {
	Create(ctx context.Context, r userns.Range, usernsPath, netnsPath string) error
}

// Backend implements backend.Backend on this host.
type Backend struct {
	cfg      Config
	log      *slog.Logger
	runtimes map[string]runtime.Runtime
	defRT    string
	net      *network.Manager
	rootfs   *rootfs.Manager

	mu        sync.Mutex
	sandboxes map[string]*sandbox
	closed    atomic.Bool // set by Close: exit watchers no longer act
	egress    EgressProxy // nil without one
	logMu     sync.Mutex  // serialises writes to decision logs

	snapMu     sync.Mutex                // guards snapshot records and layerUsers
	layerUsers map[string][]rootfs.Layer // sandbox ID -> the snapshot layers it stacks

	volMu    sync.Mutex                       // guards volUsers and volume deletion
	volUsers map[string][]backend.VolumeMount // sandbox ID -> the volumes it mounts
}

// sandbox is what the backend remembers about one instance; it is also persisted
// as <dir>/sandbox.json so a restarted server can re-adopt the sandbox.
type sandbox struct {
	ID        string     `json:"id"`
	Addr      netip.Addr `json:"addr"`
	Runtime   string     `json:"runtime"`
	Lower     string     `json:"lower"`
	CPUCount  int        `json:"cpuCount"`
	StartedAt time.Time  `json:"startedAt"`
	Paused    bool       `json:"paused"`
	// PauseMode is the mode of the current pause; while a filesystem or checkpoint
	// pause is in progress it is set before Paused (the intent Recover acts on).
	PauseMode backend.PauseMode `json:"pauseMode,omitempty"`
	// Init is re-sent to the agent when a filesystem-paused sandbox starts again.
	Init agentapi.InitRequest `json:"init"`
	// NoInternet is re-applied when the sandbox's network has to be rebuilt.
	NoInternet bool `json:"noInternet,omitempty"`
	// IDs is the sandbox's host id range; zero without a user namespace.
	IDs userns.Range `json:"ids,omitzero"`
	// Rootfs is the overlay mount point; "" = <dir>/rootfs (sandboxes created
	// before run dirs existed).
	Rootfs string `json:"rootfs,omitempty"`
	// Layers are the snapshot layers between its disk and Lower (started from
	// a snapshot), topmost first.
	Layers []rootfs.Layer `json:"layers,omitempty"`
	// Agent is the agent binary it runs when not Config.AgentBinary: the one
	// a full snapshot it was restored from pinned (its memory runs that
	// binary's code).
	Agent string `json:"agent,omitempty"`
	// Volumes are the volumes it mounts.
	Volumes []backend.VolumeMount `json:"volumes,omitempty"`
	// egress is the sandbox's egress policy (not persisted: it holds
	// credentials; the control plane sets it again after a restart).
	egress    *policy.Policy
	egressSet bool                          // rules of a non-zero policy may be in nftables and the proxy
	egressNow atomic.Pointer[policy.Policy] // egress, for readers that must not wait for mu
	// Start is the template's start command, run again at each boot from disk.
	Start *backend.StartCommand `json:"start,omitempty"`
	// Link is true when Init.AccessToken is the agent's link credential
	// (agentapi.LinkToken), as for every sandbox this server version starts;
	// state written by an older server lacks it (see adoptCredential).
	Link bool `json:"link,omitempty"`
	// Rekey is the credential the agent of a sandbox adopted from an older
	// server still accepts (the clients' access token) until rekey gives it
	// its link credential; "" otherwise.
	Rekey string `json:"rekey,omitempty"`
	// MemoryHeldToken is true while s runs the memory of an agent that held
	// the clients' access token (adopted from an older server, not restarted
	// from disk since): its snapshots are taken without memory (mode filesystem).
	MemoryHeldToken bool `json:"memoryHeldToken,omitempty"`

	mu      sync.Mutex // serialises lifecycle operations on this sandbox
	out     *sandboxlog.Output
	outNow  atomic.Pointer[sandboxlog.Output] // out, for writers of host records that must not wait for mu
	lastCPU cpuReading
	// gen counts intentional stops of the container; an exit watcher started in an
	// earlier generation ignores the exit (guarded by mu).
	gen int
}

type cpuReading struct {
	at    time.Time
	usage uint64
}

// New returns a backend using the given runtimes (the first is the default),
// network manager and rootfs manager. The network must already be Setup.
func New(cfg Config, rts []runtime.Runtime, nm *network.Manager, rm *rootfs.Manager, log *slog.Logger) (*Backend, error) {
	if len(rts) == 0 {
		return nil, errors.New("local backend: no runtime")
	}
	if cfg.PidsLimit == 0 {
		cfg.PidsLimit = 4096
	}
	if cfg.ReadyTimeout == 0 {
		cfg.ReadyTimeout = 30 * time.Second
	}
	if cfg.RunDir == "" {
		cfg.RunDir = filepath.Join(cfg.Dir, "..", "run")
	}
	if cfg.SnapshotDir == "" {
		cfg.SnapshotDir = filepath.Join(cfg.Dir, "..", "snapshots")
	}
	if cfg.VolumeDir == "" {
		cfg.VolumeDir = filepath.Join(cfg.Dir, "..", "volumes")
	}
	if cfg.Userns && (cfg.IDs == nil || cfg.Namespaces == nil) {
		return nil, errors.New("local backend: user namespaces need an id allocator and a namespace creator")
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("create sandboxes dir: %w", err)
	}
	for _, dir := range []string{cfg.SnapshotDir, cfg.VolumeDir} {
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	if err := os.MkdirAll(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	if err := os.Chmod(cfg.RunDir, 0o711); err != nil {
		return nil, fmt.Errorf("create run dir: %w", err)
	}
	b := &Backend{
		cfg: cfg, log: log, net: nm, rootfs: rm, egress: cfg.Egress,
		runtimes:  map[string]runtime.Runtime{},
		defRT:     rts[0].Name(),
		sandboxes: map[string]*sandbox{}, layerUsers: map[string][]rootfs.Layer{},
		volUsers: map[string][]backend.VolumeMount{},
	}
	for _, rt := range rts {
		b.runtimes[rt.Name()] = rt
	}
	return b, nil
}

func (b *Backend) sandboxDir(id string) string { return filepath.Join(b.cfg.Dir, id) }

func (b *Backend) runtimeFor(name string) (runtime.Runtime, error) {
	if name == "" {
		name = b.defRT
	}
	rt, ok := b.runtimes[name]
	if !ok {
		return nil, fmt.Errorf("unknown runtime %q", name)
	}
	return rt, nil
}

func (b *Backend) get(id string) (*sandbox, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	s, ok := b.sandboxes[id]
	if !ok {
		return nil, fmt.Errorf("sandbox %s: %w", id, backend.ErrNotFound)
	}
	return s, nil
}

// current reports whether s is still the registered sandbox for its ID (not
// killed or forgotten while the caller waited for s.mu).
func (b *Backend) current(s *sandbox) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.sandboxes[s.ID] == s
}

// instance reports s; the host interface is derived from the ID (the network
// manager names each sandbox's host link after it).
func (b *Backend) instance(s *sandbox) backend.Instance {
	in := backend.Instance{SandboxID: s.ID, Addr: s.Addr, HostIface: b.net.HostVeth(s.ID), Runtime: s.Runtime,
		Paused: s.Paused, StartedAt: s.StartedAt}
	if s.Paused {
		in.PauseMode = s.PauseMode
	}
	return in
}

func (b *Backend) saveState(s *sandbox) error {
	data, err := json.Marshal(s)
	if err != nil {
		return fmt.Errorf("encode sandbox state: %w", err)
	}
	path := filepath.Join(b.sandboxDir(s.ID), "sandbox.json")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return fmt.Errorf("write sandbox state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("commit sandbox state: %w", err)
	}
	return nil
}

func (b *Backend) loadState(id string) (*sandbox, error) {
	data, err := os.ReadFile(filepath.Join(b.sandboxDir(id), "sandbox.json"))
	if err != nil {
		return nil, fmt.Errorf("read sandbox state %s: %w", id, err)
	}
	var s sandbox
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("decode sandbox state %s: %w", id, err)
	}
	return &s, nil
}

// Lookup implements backend.Backend.
func (b *Backend) Lookup(_ context.Context, id string) (backend.Instance, error) {
	s, err := b.get(id)
	if err != nil {
		return backend.Instance{}, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return b.instance(s), nil
}

// Lowers returns the template trees (CreateRequest.RootfsDir) of every
// sandbox this backend runs, running or paused, and of every snapshot it
// holds (sandboxes start from a snapshot over its template's tree): what a
// template clean-up must keep.
func (b *Backend) Lowers() map[string]bool {
	out := b.snapshotLowers()
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, s := range b.sandboxes {
		out[s.Lower] = true
	}
	return out
}

// Close implements backend.Backend; sandboxes keep running. Afterwards the backend
// no longer reacts to sandboxes exiting (a later backend re-adopts them).
func (b *Backend) Close() error {
	b.closed.Store(true)
	return nil
}

var _ backend.Backend = (*Backend)(nil)

// agentClient returns a client for the agent of s, bound to its host link,
// authenticated with token ("" = none).
func (b *Backend) agentClient(s *sandbox, token string) *agentclient.Client {
	return agentclient.New(s.Addr, b.net.HostVeth(s.ID), token)
}

// DefaultRuntime is the name of the runtime sandboxes get when their
// request names none (CreateRequest.Runtime "").
func (b *Backend) DefaultRuntime() string { return b.defRT }

// CanCheckpoint reports whether runtime name ("" = the default) takes full
// snapshots (memory and processes) of running sandboxes: runsc does, runc
// does not (Snapshot then captures files only). It returns the runtime's
// resolved name too; an unknown runtime cannot.
func (b *Backend) CanCheckpoint(name string) (string, bool) {
	rt, err := b.runtimeFor(name)
	if err != nil {
		return cmp.Or(name, b.defRT), false
	}
	_, ok := rt.(runtime.Snapshotter)
	return rt.Name(), ok
}
