package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/cni"
)

func newNetCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "net", Short: "Inspect and validate network configurations"}
	cmd.AddCommand(&cobra.Command{
		Use:   "ls",
		Short: "List the networks in the conf dir, and the files that could not be loaded",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dc, err := cni.LoadDir(opts.confDir)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tCNIVERSION\tPLUGINS\tFILE")
			for _, n := range dc.Networks {
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Name, n.CNIVersion, pluginTypes(n), n.Path)
			}
			w.Flush()
			for _, b := range dc.Broken {
				fmt.Fprintf(cmd.OutOrStdout(), "broken: %v\n", b)
			}
			return nil
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "validate [NETWORK...]",
		Short: "Check configs and plugins: files parse, plugins exist, are executable and support the version",
		RunE: func(cmd *cobra.Command, names []string) error {
			ctx, cancel := opts.context(cmd)
			defer cancel()
			dc, err := cni.LoadDir(opts.confDir)
			if err != nil {
				return err
			}
			rt := opts.runtime()
			out := cmd.OutOrStdout()
			problems := len(dc.Broken)
			for _, b := range dc.Broken {
				fmt.Fprintf(out, "FAIL %v\n", b)
			}
			want := map[string]bool{}
			for _, n := range names {
				want[n] = true
				if dc.Network(n) == nil {
					fmt.Fprintf(out, "FAIL network %q: not found in %s\n", n, opts.confDir)
					problems++
				}
			}
			for _, n := range dc.Networks {
				if len(want) > 0 && !want[n.Name] {
					continue
				}
				caps, err := rt.ValidateNetworkList(ctx, n)
				if err != nil {
					problems++
					fmt.Fprintf(out, "FAIL network %q (%s): %v\n", n.Name, n.Path, err)
					continue
				}
				fmt.Fprintf(out, "ok   network %q (%s) cniVersion %s plugins %s capabilities [%s]\n",
					n.Name, n.Path, n.CNIVersion, pluginTypes(n), strings.Join(caps, ","))
				printReaders(out, n)
			}
			if problems > 0 {
				return fmt.Errorf("%d problem(s) found", problems)
			}
			return nil
		},
	})
	return cmd
}

// printReaders says which runtimes run the network, at which version: a
// file only podnet can read is not what a node with containerd 1.6 needs.
func printReaders(out io.Writer, n *cni.NetworkConfigList) {
	for _, r := range cni.KnownReaders {
		if v, err := r.VersionFor(n); err != nil {
			fmt.Fprintf(out, "       not run by %s: %v\n", r.Name, err)
		} else {
			fmt.Fprintf(out, "       run by %s at %s\n", r.Name, v)
		}
	}
}

func pluginTypes(n *cni.NetworkConfigList) string {
	types := make([]string, len(n.Plugins))
	for i, p := range n.Plugins {
		types[i] = p.Type
	}
	return strings.Join(types, ",")
}
