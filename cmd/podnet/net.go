package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/cni"
)

func newNetCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "net", Short: "Inspect and validate network configurations"}
	cmd.AddCommand(newNetLsCommand(opts), newNetValidateCommand(opts))
	return cmd
}

// netList is `net ls -o json`.
type netList struct {
	Networks []netEntry `json:"networks"`
	// Broken are the files that could not be loaded, each with why.
	Broken []string `json:"broken"`
}

type netEntry struct {
	Name       string   `json:"name"`
	CNIVersion string   `json:"cniVersion"`
	Plugins    []string `json:"plugins"`
	File       string   `json:"file"`
}

func newNetLsCommand(opts *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the networks in the conf dir, and the files that could not be loaded",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dc, err := cni.LoadDir(opts.confDir)
			if err != nil {
				return err
			}
			rep := netList{Networks: []netEntry{}, Broken: errorStrings(dc.Broken)}
			for _, n := range dc.Networks {
				rep.Networks = append(rep.Networks, netEntry{Name: n.Name, CNIVersion: n.CNIVersion, Plugins: pluginList(n), File: n.Path})
			}
			return writeOutput(cmd.OutOrStdout(), output, rep)
		},
	}
	addOutputFlag(cmd, &output, outputTable, outputJSON)
	return cmd
}

func (r netList) writeText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tCNIVERSION\tPLUGINS\tFILE")
	for _, n := range r.Networks {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\n", n.Name, n.CNIVersion, strings.Join(n.Plugins, ","), n.File)
	}
	if err := w.Flush(); err != nil {
		return err
	}
	for _, b := range r.Broken {
		fmt.Fprintf(out, "broken: %s\n", b)
	}
	return nil
}

// validateReport is `net validate -o json`. Problems counts the broken
// files, the networks asked for and missing, and the networks that
// failed; the command exits 1 when it is not 0.
type validateReport struct {
	Networks []validatedNetwork `json:"networks"`
	Broken   []string           `json:"broken"`
	Missing  []string           `json:"missing"`
	ConfDir  string             `json:"confDir"`
	Problems int                `json:"problems"`
}

type validatedNetwork struct {
	Name         string   `json:"name"`
	File         string   `json:"file"`
	CNIVersion   string   `json:"cniVersion"`
	Plugins      []string `json:"plugins"`
	OK           bool     `json:"ok"`
	Error        string   `json:"error,omitempty"`
	Capabilities []string `json:"capabilities,omitempty"`
	// Runtimes say which runtimes run the network, at which version: a
	// file only podnet can read is not what a node with containerd 1.6
	// needs.
	Runtimes []runtimeVersion `json:"runtimes,omitempty"`
}

type runtimeVersion struct {
	Runtime string `json:"runtime"`
	Version string `json:"version,omitempty"`
	Error   string `json:"error,omitempty"`
}

func newNetValidateCommand(opts *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "validate [NETWORK...]",
		Short: "Check configs and plugins: files parse, plugins exist, are executable and support the version",
		ValidArgsFunction: func(_ *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			var out []cobra.Completion
			for _, c := range networkNames(opts.confDir) {
				if name, _, _ := strings.Cut(c, "\t"); !slices.Contains(args, name) {
					out = append(out, c)
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, names []string) error {
			rep, err := validateNetworks(cmd, opts, names)
			if err != nil {
				return err
			}
			if err := writeOutput(cmd.OutOrStdout(), output, rep); err != nil {
				return err
			}
			if rep.Problems > 0 {
				return fmt.Errorf("%d problem(s) found", rep.Problems)
			}
			return nil
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// validateNetworks validates the networks named (every one without
// names) with their plugins.
func validateNetworks(cmd *cobra.Command, opts *globalOptions, names []string) (validateReport, error) {
	ctx, cancel := opts.context(cmd)
	defer cancel()
	rep := validateReport{Networks: []validatedNetwork{}, ConfDir: opts.confDir}
	dc, err := cni.LoadDir(opts.confDir)
	if err != nil {
		return rep, err
	}
	rt := opts.runtime()
	rep.Broken = errorStrings(dc.Broken)
	for _, n := range names {
		if dc.Network(n) == nil {
			rep.Missing = append(rep.Missing, n)
		}
	}
	for _, n := range dc.Networks {
		if len(names) > 0 && !slices.Contains(names, n.Name) {
			continue
		}
		v := validatedNetwork{Name: n.Name, File: n.Path, CNIVersion: n.CNIVersion, Plugins: pluginList(n)}
		caps, err := rt.ValidateNetworkList(ctx, n)
		if err != nil {
			v.Error = err.Error()
		} else {
			v.OK, v.Capabilities, v.Runtimes = true, caps, runtimesOf(n)
		}
		rep.Networks = append(rep.Networks, v)
	}
	rep.Problems = len(rep.Broken) + len(rep.Missing)
	for _, v := range rep.Networks {
		if !v.OK {
			rep.Problems++
		}
	}
	return rep, nil
}

func runtimesOf(n *cni.NetworkConfigList) []runtimeVersion {
	var out []runtimeVersion
	for _, r := range cni.KnownReaders {
		rv := runtimeVersion{Runtime: r.Name}
		if v, err := r.VersionFor(n); err != nil {
			rv.Error = err.Error()
		} else {
			rv.Version = v
		}
		out = append(out, rv)
	}
	return out
}

func (r validateReport) writeText(out io.Writer) error {
	for _, b := range r.Broken {
		fmt.Fprintf(out, "FAIL %s\n", b)
	}
	for _, n := range r.Missing {
		fmt.Fprintf(out, "FAIL network %q: not found in %s\n", n, r.ConfDir)
	}
	for _, v := range r.Networks {
		if !v.OK {
			fmt.Fprintf(out, "FAIL network %q (%s): %s\n", v.Name, v.File, v.Error)
			continue
		}
		fmt.Fprintf(out, "ok   network %q (%s) cniVersion %s plugins %s capabilities [%s]\n",
			v.Name, v.File, v.CNIVersion, strings.Join(v.Plugins, ","), strings.Join(v.Capabilities, ","))
		for _, rv := range v.Runtimes {
			if rv.Error != "" {
				fmt.Fprintf(out, "       not run by %s: %s\n", rv.Runtime, rv.Error)
			} else {
				fmt.Fprintf(out, "       run by %s at %s\n", rv.Runtime, rv.Version)
			}
		}
	}
	return nil
}

func pluginList(n *cni.NetworkConfigList) []string {
	types := make([]string, len(n.Plugins))
	for i, p := range n.Plugins {
		types[i] = p.Type
	}
	return types
}

func pluginTypes(n *cni.NetworkConfigList) string {
	return strings.Join(pluginList(n), ",")
}
