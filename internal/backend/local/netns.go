package local

import (
	"context"
	"fmt"

	"github.com/cubby-dev/cubby/internal/userns"
)

// ensureNetwork makes sure a stopped sandbox about to start again has a working
// network: its kept netns and host link are configured again (network.Restore:
// gVisor takes eth0's address, routes and neighbours away when it starts), and
// when the netns file, its veth or the user namespace file is gone (removed by
// a sweep, or lost across a host reboot) the network is rebuilt, with a new
// user namespace of the same range. The address may then change: s.Addr and the
// sandbox's /etc/hosts follow. The bundle needs no change (the netns and user
// namespace paths are derived from the ID).
func (b *Backend) ensureNetwork(ctx context.Context, s *sandbox) error {
	err := b.net.Restore(ctx, s.ID)
	if err == nil && !s.IDs.IsZero() {
		err = userns.Check(b.usernsPath(s.ID))
	}
	if err == nil {
		return nil
	}
	b.log.Warn("network of stopped sandbox is gone; rebuilding it", "sandbox", s.ID, "reason", err)
	if err := b.detach(ctx, s.ID); err != nil {
		return fmt.Errorf("clear old network: %w", err)
	}
	att, err := b.attach(ctx, s)
	if err != nil {
		return fmt.Errorf("rebuild network: %w", err)
	}
	s.Addr = att.Addr
	if err := b.applyEgress(ctx, s); err != nil {
		return fmt.Errorf("egress policy: %w", err)
	}
	if _, err := writeEtcFiles(b.sandboxDir(s.ID), s.ID, s.Addr.String()); err != nil {
		return err
	}
	return b.saveState(s)
}
