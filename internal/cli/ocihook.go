package cli

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/bootid"
)

// newOCIHookCmd is `cubby oci-hook boot-id FILE`, the OCI createContainer hook
// the local backend puts in runc bundles (package bootid). Not for users.
func newOCIHookCmd() *cobra.Command {
	hook := &cobra.Command{
		Use:    bootid.HookCommand[0],
		Short:  "OCI runtime hooks of Cubby's sandboxes (run by the OCI runtime)",
		Hidden: true,
	}
	hook.AddCommand(&cobra.Command{
		Use:   bootid.HookCommand[1] + " FILE",
		Short: "Bind FILE over the boot_id of the container being created (OCI state on stdin)",
		Args:  cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return bootid.RunHook(os.Stdin, args[0])
		},
	})
	return hook
}
