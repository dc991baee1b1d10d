package cli

import (
	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/bootid"
)

// newOCIHookCmd is `cubby oci-hook boot-id FILE ROOTFS`, the OCI createContainer hook
// the local backend puts in runc bundles (package bootid). Not for users.
func newOCIHookCmd() *cobra.Command {
	hook := &cobra.Command{
		Use:    bootid.HookCommand[0],
		Short:  "OCI runtime hooks of Cubby's sandboxes (run by the OCI runtime)",
		Hidden: true,
	}
	hook.AddCommand(&cobra.Command{
		Use:   bootid.HookCommand[1] + " FILE ROOTFS",
		Short: "Bind FILE over the boot_id of the container being created, its root filesystem at ROOTFS",
		Args:  cobra.ExactArgs(2),
		RunE: func(_ *cobra.Command, args []string) error {
			return bootid.RunHook(args[0], args[1])
		},
	})
	return hook
}
