package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"time"

	"github.com/cubby-dev/cubby/internal/backend/local"
	"github.com/cubby-dev/cubby/internal/network"
	"github.com/cubby-dev/cubby/internal/outbound"
	"github.com/cubby-dev/cubby/internal/rootfs"
	"github.com/cubby-dev/cubby/internal/template"
)

// Standalone is a template builder with a sandbox backend of its own, for
// `cubby template build` without a running server: its build sandboxes get
// their own bridge and subnet (cfg.Bridge, cfg.Subnet) and keep their state
// under <DataDir>/template-build. Close removes the bridge and its
// firewall table.
type Standalone struct {
	Builder *template.Builder
	Manager *template.Manager
	net     *network.Manager
	log     *slog.Logger
}

// NewStandalone sets up the backend (sweeping what an interrupted earlier
// run left) and the builder.
func NewStandalone(ctx context.Context, cfg Config, log *slog.Logger) (*Standalone, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	tm, err := template.NewManager(cfg.TemplatesDir, log.With("component", "template"))
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(cfg.DataDir, "template-build")
	nm, err := network.New(network.Config{Bridge: cfg.Bridge, Subnet: cfg.Subnet, Prefix: cfg.Bridge + "-"}, log.With("component", "network"))
	if err != nil {
		return nil, fmt.Errorf("network: %w", err)
	}
	if err := setupWaiting(ctx, nm, log); err != nil {
		return nil, fmt.Errorf("set up build network: %w", err)
	}
	s := &Standalone{Manager: tm, net: nm, log: log}
	b, err := s.backend(ctx, cfg, dir)
	if err == nil {
		var ob outbound.Settings
		if ob, err = outbound.FromHost(cfg.OutboundCA); err == nil {
			s.Builder, err = newBuilder(cfg, tm, b, nil, ob, log)
		}
	}
	if err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

func (s *Standalone) backend(ctx context.Context, cfg Config, dir string) (*local.Backend, error) {
	exe, err := executable()
	if err != nil {
		return nil, err
	}
	cfg.DataDir = dir
	rts, err := runtimes(ctx, cfg, exe, s.log)
	if err != nil {
		return nil, err
	}
	ids, creator, err := sandboxIDs(exe, s.log)
	if err != nil {
		return nil, err
	}
	rm := rootfs.New(filepath.Join(dir, "cache", "disks"), s.log.With("component", "rootfs"))
	b, err := local.New(local.Config{
		Dir: filepath.Join(dir, "sandboxes"), RunDir: DefaultRunDir(dir), AgentBinary: exe,
		Userns: !cfg.DisableUserns, IDs: ids, Namespaces: creator,
	}, rts, s.net, rm, s.log.With("component", "backend"))
	if err != nil {
		return nil, err
	}
	if _, err := b.Recover(ctx, nil); err != nil {
		s.log.Warn("sweeping an earlier build's sandboxes", "err", err)
	}
	return b, nil
}

// Close removes the build network.
func (s *Standalone) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), timeoutTeardown)
	defer cancel()
	return errors.Join(s.net.Teardown(ctx), s.net.Close())
}

// BuildDefinition builds a cubby-template.yaml definition, printing its log
// entries as progress lines to progress (may be nil).
func (s *Standalone) BuildDefinition(ctx context.Context, def template.Definition, force bool, progress func(template.Entry)) (template.Info, error) {
	return buildDefinition(ctx, s.Builder, def, progress, force)
}

// bridgeRetry is how often setupWaiting tries again for a bridge another
// process holds.
const bridgeRetry = time.Second

// setupWaiting sets up nm's network, waiting while another process holds its
// bridge (another `cubby template build` on this host: builds of one host
// queue on the build bridge instead of failing). It says once what it waits
// for; ctx ends the wait. Other errors return at once.
func setupWaiting(ctx context.Context, nm *network.Manager, log *slog.Logger) error {
	said := false
	for {
		err := nm.Setup(ctx)
		if !errors.Is(err, network.ErrBridgeInUse) {
			return err
		}
		if !said {
			log.Warn("waiting for the build bridge", "err", err)
			said = true
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(bridgeRetry):
		}
	}
}
