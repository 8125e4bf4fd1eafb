package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/install"
)

func newInstallCommand(opts *globalOptions) *cobra.Command {
	var n install.Network
	var srcDir string
	var noConfig bool
	var output string
	cmd := &cobra.Command{
		Use:   "install",
		Short: "Install podnet's plugins into the bin dir and its network config into the conf dir",
		Long: `install copies podnet's plugin binaries (podnet, podnet-ipam, podnet-portmap,
loopback) into the first --bin-dir and writes a network config into
--conf-dir as 10-<network>.conflist: podnet with podnet-ipam, holding the
portMappings capability, so that a pod's addresses, interfaces, masquerade
and host ports are one plugin exec; with --portmap-plugin, podnet-portmap
chained after podnet publishes the host ports instead (same rules). Both
are replaced atomically: a runtime never sees a half-written file, and
plugins already running keep working.

Without --mtu the pods get the MTU of the host's default route (the
smaller of IPv4's and IPv6's): on one machine nothing encapsulates pod
traffic, so pods send packets as large as the host does, and none depends
on ICMP "fragmentation needed" to find the path's limit. --mtu 0 leaves it
to the kernel (1500).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := runInstall(opts, n, srcDir, noConfig, cmd.Flags().Changed("mtu"))
			if rep.BinDir == "" {
				return err
			}
			return errors.Join(writeOutput(cmd.OutOrStdout(), output, rep), err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&n.Name, "network", install.DefaultNetworkName, "network name")
	f.StringSliceVar(&n.Pools, "pool", []string{install.DefaultPool}, "pod address pools, one per family for dual-stack (repeat or separate with commas)")
	f.StringVar(&n.Mode, "mode", "routed", "routed (a /32 per pod, routed by the host) or bridge")
	f.StringVar(&n.Store, "store", install.DefaultStore, "IPAM store: bolt:PATH or etcd://HOST:PORT,...")
	f.StringVar(&n.Node, "node", "", "node name for IPAM (default: the host name)")
	f.IntVar(&n.MTU, "mtu", 0, "pod interface MTU (default: the default route's path MTU; 0: the kernel's)")
	f.StringVar(&srcDir, "src-dir", "", "where the plugin binaries are (default: cni/ beside the podnet binary)")
	f.BoolVar(&noConfig, "no-config", false, "install the plugins only")
	f.BoolVar(&n.PortmapPlugin, "portmap-plugin", false, "publish host ports with podnet-portmap chained after podnet (one more exec per pod)")
	addOutputFlag(cmd, &output, outputText, outputJSON)
	registerValues(cmd, "mode", "routed", "bridge")
	return cmd
}

// installReport is `install -o json`: the plugins installed where, and
// the config written (none with --no-config) with its pod MTU.
type installReport struct {
	Plugins []string `json:"plugins"`
	BinDir  string   `json:"binDir"`
	// Config is the file written, empty with --no-config.
	Config string `json:"config,omitempty"`
	MTU    int    `json:"mtu,omitempty"`
	// MTUNote says where the MTU came from when --mtu did not give it.
	MTUNote string `json:"mtuNote,omitempty"`
}

func (r installReport) writeText(w io.Writer) error {
	if r.MTUNote != "" {
		fmt.Fprintln(w, r.MTUNote)
	}
	fmt.Fprintf(w, "installed %v into %s\n", r.Plugins, r.BinDir)
	if r.Config != "" {
		fmt.Fprintf(w, "wrote %s\n", r.Config)
	}
	return nil
}

// runInstall installs the plugins and, unless noConfig, writes n's
// config. A report without BinDir means nothing was installed.
func runInstall(opts *globalOptions, n install.Network, srcDir string, noConfig, mtuSet bool) (installReport, error) {
	var rep installReport
	if srcDir == "" {
		var err error
		if srcDir, err = defaultPluginDir(); err != nil {
			return rep, err
		}
	}
	var conf []byte
	if !noConfig {
		mtu, note, err := installMTU(mtuSet, n.MTU, defaultRouteMTU)
		if err != nil {
			return rep, err
		}
		rep.MTUNote, rep.MTU, n.MTU = note, mtu, mtu
		// Built before anything is copied: a bad flag changes nothing.
		if conf, err = install.ConfList(n); err != nil {
			return rep, err
		}
	}
	dst := opts.binDirs[0]
	if err := install.Plugins(srcDir, dst, install.PluginNames); err != nil {
		return rep, err
	}
	rep.Plugins, rep.BinDir = install.PluginNames, dst
	if noConfig {
		return rep, nil
	}
	name := n.Name
	if name == "" {
		name = install.DefaultNetworkName
	}
	path := filepath.Join(opts.confDir, install.ConfFileName(name))
	if err := install.WriteFile(path, conf, 0o644); err != nil {
		return rep, err
	}
	rep.Config = path
	return rep, nil
}

// installMTU is the pod MTU `podnet install` writes and what to tell the
// user of it: --mtu when given (flagSet), else the MTU of the host's
// default routes as lookup finds it (the value and its interface). A host
// without a default route leaves it to the kernel.
func installMTU(flagSet bool, flagMTU int, lookup func() (int, string, error)) (mtu int, note string, err error) {
	if flagSet {
		return flagMTU, "", nil
	}
	mtu, dev, err := lookup()
	switch {
	case err != nil:
		return 0, "", fmt.Errorf("pod MTU from the default route (or set --mtu): %w", err)
	case mtu == 0:
		return 0, "no default route: the pod MTU is left to the kernel (1500); --mtu sets one", nil
	case mtu < minIPv4MTU:
		return 0, "", fmt.Errorf("pod MTU from the default route: %s has MTU %d, below IPv4's minimum of %d: set --mtu", dev, mtu, minIPv4MTU)
	}
	mtu = min(mtu, maxIPMTU)
	return mtu, fmt.Sprintf("pod MTU %d: that of %s, the default route's interface (--mtu to choose another)", mtu, dev), nil
}

// IPv4's minimum MTU, and the largest IP packet.
const (
	minIPv4MTU = 68
	maxIPMTU   = 65535
)

// defaultRouteMTU is dataplane.DefaultRouteMTU in this process's network
// namespace.
func defaultRouteMTU() (int, string, error) {
	h, err := dataplane.NewHandle()
	if err != nil {
		return 0, "", err
	}
	defer h.Close()
	return dataplane.DefaultRouteMTU(h)
}

// defaultPluginDir is cni/ beside the podnet executable, where `make build`
// and the container image put the plugins (the main plugin is called
// podnet too, so it cannot sit beside the CLI).
func defaultPluginDir() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", err
	}
	return filepath.Join(filepath.Dir(exe), "cni"), nil
}
