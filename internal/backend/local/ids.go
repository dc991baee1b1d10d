package local

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/runtime"
	"github.com/cubby-dev/cubby/internal/runtime/oci"
	"github.com/cubby-dev/cubby/internal/userns"
)

// usernsName is the bind mount of a sandbox's user namespace in its directory.
const usernsName = "userns"

// runDir is sandbox id's directory below RunDir (see the package doc).
func (b *Backend) runDir(id string) string { return filepath.Join(b.cfg.RunDir, id) }

func (b *Backend) usernsPath(id string) string { return filepath.Join(b.sandboxDir(id), usernsName) }

// disk is where the root filesystem of s lives and how it is mapped (no
// mapping without a range). A sandbox recorded without a rootfs path (created
// before run dirs existed) keeps its rootfs in its directory.
func (b *Backend) disk(s *sandbox) rootfs.Disk {
	d := rootfs.Disk{Dir: b.sandboxDir(s.ID), Rootfs: s.Rootfs, Layers: s.Layers}
	if d.Rootfs == "" {
		d.Rootfs = filepath.Join(d.Dir, rootfs.RootfsName)
	}
	if !s.IDs.IsZero() {
		d.Userns, d.IDs = b.usernsPath(s.ID), s.IDs
	}
	return d
}

// provision gives the new sandbox s its id range (with user namespaces on), its
// run directory and its network with its egress policy, and pushes their undo
// steps. It returns the netns path.
func (b *Backend) provision(ctx context.Context, s *sandbox, undo *undoStack) (string, error) {
	cleanupCtx := context.WithoutCancel(ctx)
	if b.cfg.Userns {
		owner := b.sandboxDir(s.ID)
		ids, err := b.cfg.IDs.Claim(owner, userns.Range{})
		if err != nil {
			return "", err
		}
		s.IDs = ids
		undo.push(func() { _ = b.cfg.IDs.Release(owner, ids) })
	}
	undo.push(func() { _ = os.RemoveAll(b.runDir(s.ID)) })
	if err := b.prepareRunDir(s); err != nil {
		return "", err
	}
	att, err := b.attach(ctx, s)
	if err != nil {
		return "", fmt.Errorf("attach network: %w", err)
	}
	undo.push(func() { _ = b.detach(cleanupCtx, s.ID) })
	s.Addr = att.Addr
	if err := b.applyEgress(ctx, s); err != nil {
		return "", fmt.Errorf("egress policy: %w", err)
	}
	undo.push(func() { b.forgetEgress(cleanupCtx, s.ID) })
	return att.NetnsPath, nil
}

// prepareRunDir creates (or fixes) sandbox s's run directory: mode 0700, owned
// by its mapped root, or by host root without a range.
func (b *Backend) prepareRunDir(s *sandbox) error {
	dir := b.runDir(s.ID)
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("create run dir: %w", err)
	}
	owner := 0
	if !s.IDs.IsZero() {
		owner = int(s.IDs.HostID)
	}
	if err := os.Chown(dir, owner, owner); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return fmt.Errorf("create run dir: %w", err)
	}
	return nil
}

// attach gives s its network. With an id range the network namespace is made
// together with the sandbox's user namespace, which owns it: root inside then
// holds its capabilities over its own network (binding ports below 1024, raw
// sockets, mounting its sysfs) and over nothing of the host's.
func (b *Backend) attach(ctx context.Context, s *sandbox) (network.Attachment, error) {
	if s.IDs.IsZero() {
		return b.net.Attach(ctx, s.ID)
	}
	if b.cfg.Namespaces == nil {
		return network.Attachment{}, errors.New("sandbox has a user namespace but the backend has no namespace creator")
	}
	user := b.usernsPath(s.ID)
	att, err := b.net.AttachWith(ctx, s.ID, func(netns string) error {
		return b.cfg.Namespaces.Create(ctx, s.IDs, user, netns)
	})
	if err != nil {
		_ = userns.Remove(user)
	}
	return att, err
}

// detach removes sandbox id's network and its user namespace file.
func (b *Backend) detach(ctx context.Context, id string) error {
	return errors.Join(b.net.Detach(ctx, id), userns.Remove(b.usernsPath(id)))
}

// userNS is the spec's user namespace of s on rt: the sandbox's namespace
// file, or only its mapping for a runtime that creates the namespace itself;
// nil without a range.
func (b *Backend) userNS(s *sandbox, rt runtime.Runtime) *oci.UserNS {
	if s.IDs.IsZero() {
		return nil
	}
	u := &oci.UserNS{Path: b.usernsPath(s.ID), HostID: s.IDs.HostID, Size: s.IDs.Size}
	if c, ok := rt.(runtime.UsernsCreator); ok && c.CreatesUserns() {
		u.Path = ""
	}
	return u
}

// releaseIDs drops sandbox id's lease: of ids when known (read from its state
// before its directory went), else of whatever range names its directory.
func (b *Backend) releaseIDs(id string, ids userns.Range, known bool) error {
	switch owner := b.sandboxDir(id); {
	case b.cfg.IDs == nil:
		return nil
	case !known:
		return b.cfg.IDs.ReleaseOwner(owner)
	case ids.IsZero():
		return nil
	default:
		return b.cfg.IDs.Release(owner, ids)
	}
}

// reclaimIDs re-leases the recorded range of a sandbox being re-adopted. A range
// that went to another sandbox meanwhile (the lease was lost) is acceptable only
// for a stopped sandbox: it gets a new range and new namespaces at its next start.
func (b *Backend) reclaimIDs(ctx context.Context, s *sandbox, running bool) error {
	if s.IDs.IsZero() {
		return nil
	}
	if b.cfg.IDs == nil {
		return errors.New("sandbox has an id range but the backend has no id allocator")
	}
	owner := b.sandboxDir(s.ID)
	got, err := b.cfg.IDs.Claim(owner, s.IDs)
	if err != nil || got == s.IDs {
		return err
	}
	if running {
		return errors.Join(fmt.Errorf("id range %s was leased to another sandbox", s.IDs), b.cfg.IDs.Release(owner, got))
	}
	b.log.Warn("id range of stopped sandbox was leased to another; it gets a new one", "sandbox", s.ID, "old", s.IDs, "new", got)
	s.IDs = got
	return b.detach(ctx, s.ID)
}

// syncBundleIDs makes the id mapping in s's bundle match s.IDs, for a runtime
// that creates the user namespace from it (after a stopped sandbox got a new
// range, see reclaimIDs). A bundle joining the namespace file needs no change.
func (b *Backend) syncBundleIDs(s *sandbox, rt runtime.Runtime) error {
	u := b.userNS(s, rt)
	if u == nil || u.Path != "" {
		return nil
	}
	data, err := os.ReadFile(filepath.Join(b.bundleDir(s.ID), oci.ConfigName))
	if err != nil {
		return fmt.Errorf("read bundle: %w", err)
	}
	var spec specs.Spec
	if err := json.Unmarshal(data, &spec); err != nil || spec.Linux == nil {
		return fmt.Errorf("read bundle: %v", err)
	}
	want := []specs.LinuxIDMapping{{ContainerID: 0, HostID: u.HostID, Size: u.Size}}
	if slices.Equal(spec.Linux.UIDMappings, want) && slices.Equal(spec.Linux.GIDMappings, want) {
		return nil
	}
	spec.Linux.UIDMappings, spec.Linux.GIDMappings = want, want
	return oci.WriteBundle(b.bundleDir(s.ID), &spec)
}
