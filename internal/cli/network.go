package cli

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/network"
)

// newNetworkCmd is `cubby network`: the host network a server leaves behind
// when it stops (its sandboxes may outlive it, so it never removes it itself).
func newNetworkCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "network",
		Short: "Inspect or remove the host networks (bridge, nftables table) of stopped servers",
	}
	var bridge string
	teardown := &cobra.Command{
		Use:   "teardown --bridge NAME",
		Short: "Remove a stopped server's bridge, nftables table and leftover sandbox network namespaces and veths",
		Long: `Remove what a stopped "cubby serve --bridge NAME" left on the host: its sandbox
network namespaces and veths, its nftables table and its bridge. Refused while a
running server holds the bridge. Kill the server's sandboxes first: their
networks go with it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return teardownNetwork(cmd, bridge)
		},
	}
	teardown.Flags().StringVar(&bridge, "bridge", "", "the stopped server's --bridge")
	_ = teardown.MarkFlagRequired("bridge")
	leaks := &cobra.Command{
		Use:   "leaks",
		Short: "List bridges and nftables tables of servers that are not running; exit status 1 if there are any",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			list, err := network.Leaks(network.DefaultLockDir)
			if err != nil {
				return err
			}
			if len(list) == 0 {
				return nil
			}
			fmt.Fprintln(cmd.OutOrStdout(), strings.Join(list, "\n"))
			return errors.New("host networks of stopped servers remain (remove them with `cubby network teardown --bridge NAME`)")
		},
	}
	cmd.AddCommand(teardown, leaks)
	return cmd
}

// teardownNetwork claims the bridge (so no running server uses it), sweeps its
// sandbox networks and removes its table and bridge.
func teardownNetwork(cmd *cobra.Command, bridge string) error {
	m, err := network.New(network.Config{Bridge: bridge, Prefix: bridge + "-"}, logger(cmd, false))
	if err != nil {
		return err
	}
	defer m.Close()
	if err := m.ClaimBridge(); err != nil {
		return err
	}
	if err := m.Sweep(cmd.Context(), nil); err != nil {
		return fmt.Errorf("sweep sandbox networks of %s: %w", bridge, err)
	}
	return m.Teardown(cmd.Context())
}
