package cli

import (
	"fmt"
	"os"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"github.com/cubby-dev/cubby/internal/ociimage"
	"github.com/cubby-dev/cubby/internal/template"
)

// newTemplateExportCmd is `cubby template export`: a built template as the
// OCI image of the kubernetes backend (cubby serve --template-image).
func newTemplateExportCmd(dir func() string) *cobra.Command {
	var output, tag, workDir string
	var push bool
	cmd := &cobra.Command{
		Use:   "export <name|id>",
		Short: "Export a built template as an OCI image (template tree + agent) for the kubernetes backend",
		Long: `Export a built template as an OCI image: the template tree as one layer, this
cubby binary as the sandbox agent (/opt/cubby/bin/cubby, the container's entrypoint)
as another. --output writes a docker-archive tarball (ctr images import, docker
load); --push uploads it to the registry of --tag with your registry credentials.
Give the pushed reference to cubby serve --backend kubernetes --template-image NAME=REF.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" && !push {
				return fmt.Errorf("give --output FILE, --push, or both")
			}
			tm, err := template.NewManager(dir(), logger(cmd, false))
			if err != nil {
				return err
			}
			info, err := tm.Get(args[0])
			if err != nil {
				return err
			}
			if tag == "" {
				tag = ociimage.LocalRef(info.Name, info.Digest)
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("locate cubby binary: %w", err)
			}
			img, cleanup, err := ociimage.Build(cmd.Context(), ociimage.Spec{
				RootfsDir: info.RootfsDir, AgentBinary: exe, TemplateID: info.ID, Name: info.Name, Digest: info.Digest, WorkDir: workDir,
			})
			if err != nil {
				return err
			}
			defer cleanup()
			return exportImage(cmd, img, tag, output, push)
		},
	}
	f := cmd.Flags()
	f.StringVar(&output, "output", "", "write a docker-archive tarball here")
	f.StringVar(&tag, "tag", "", "image reference (default cubby.local/templates/NAME:DIGEST)")
	f.BoolVar(&push, "push", false, "push the image to the registry of --tag")
	f.StringVar(&workDir, "work-dir", "", "where the compressed layers are staged (default the system temp dir)")
	return cmd
}

// exportImage writes and/or pushes img and prints the reference to use.
func exportImage(cmd *cobra.Command, img v1.Image, tag, output string, push bool) error {
	if output != "" {
		if err := ociimage.WriteArchive(output, tag, img); err != nil {
			return err
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "wrote %s (%s)\n", output, tag)
	}
	if push {
		ref, err := ociimage.Push(cmd.Context(), tag, img)
		if err != nil {
			return err
		}
		tag = ref
	}
	fmt.Fprintln(cmd.OutOrStdout(), tag)
	return nil
}
