package main

import (
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/version"
)

// versionReport is `podnet version -o json`: version.Info.
type versionReport struct{ version.Info }

func (r versionReport) writeText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "podnet %s\n", r.Info)
	return err
}

func newVersionCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print podnet's version",
		Long: `Print the version this podnet was built as (the release, or X.Y.Z-dev for a
build of the tree between releases), its commit and its Go toolchain. The
agent logs the same at start, and exports it as podnet_build_info; a
node's plugins and agent come from one image and are one version.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return writeOutput(cmd.OutOrStdout(), output, versionReport{version.Get()})
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// defaultImage is podnet's released image of this build's version: a
// build between releases (0.1.0-dev) names the release it becomes.
func defaultImage() string {
	return "ghcr.io/podnet/podnet:" + strings.TrimSuffix(version.Get().Version, "-dev")
}
