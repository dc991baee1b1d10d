package cli

import (
	"fmt"
	"net/netip"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/egress"
	"github.com/cubby-dev/cubby/internal/server"
)

// newEgressProxyCmd is the egress proxy process `cubby serve` starts and
// supervises (package egress); it is not run by hand.
func newEgressProxyCmd() *cobra.Command {
	var o egress.ChildOptions
	var subnet string
	var resolvers []string
	cmd := &cobra.Command{
		Use:    egress.ChildCommand,
		Short:  "Run the egress proxy (started by cubby serve with its sockets; not for direct use)",
		Args:   cobra.NoArgs,
		Hidden: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			p, err := netip.ParsePrefix(subnet)
			if err != nil {
				return fmt.Errorf("--subnet: %w", err)
			}
			o.Subnet = p
			if o.Resolvers, err = server.ParseResolvers(resolvers); err != nil {
				return err
			}
			o.Log = logger(cmd, false).With("component", "egress-proxy")
			return egress.RunChild(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Netns, "netns", "", "network namespace the proxy dials from")
	f.StringVar(&subnet, "subnet", "", "sandbox subnet (never dialed)")
	f.StringArrayVar(&resolvers, "resolver", nil, "upstream DNS resolver ADDR[:PORT] (repeatable)")
	f.StringVar(&o.CACert, "ca-cert", "", "egress CA certificate (PEM)")
	f.StringVar(&o.CAKey, "ca-key", "", "egress CA key (PEM)")
	f.StringVar(&o.UpstreamCA, "upstream-ca", "", "extra roots (PEM) for hosts of terminated TLS")
	return cmd
}
