package main

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/install"
)

func newInstallCommand(opts *globalOptions) *cobra.Command {
	var n install.Network
	var srcDir string
	var noConfig bool
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
plugins already running keep working.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if srcDir == "" {
				var err error
				if srcDir, err = defaultPluginDir(); err != nil {
					return err
				}
			}
			var conf []byte
			if !noConfig {
				var err error
				// Built before anything is copied: a bad flag changes nothing.
				if conf, err = install.ConfList(n); err != nil {
					return err
				}
			}
			dst := opts.binDirs[0]
			if err := install.Plugins(srcDir, dst, install.PluginNames); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "installed %v into %s\n", install.PluginNames, dst)
			if noConfig {
				return nil
			}
			name := n.Name
			if name == "" {
				name = install.DefaultNetworkName
			}
			path := filepath.Join(opts.confDir, install.ConfFileName(name))
			if err := install.WriteFile(path, conf, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\n", path)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&n.Name, "network", install.DefaultNetworkName, "network name")
	f.StringSliceVar(&n.Pools, "pool", []string{install.DefaultPool}, "pod address pools, one per family for dual-stack (repeat or separate with commas)")
	f.StringVar(&n.Mode, "mode", "routed", "routed (a /32 per pod, routed by the host) or bridge")
	f.StringVar(&n.Store, "store", install.DefaultStore, "IPAM store: bolt:PATH or etcd://HOST:PORT,...")
	f.StringVar(&n.Node, "node", "", "node name for IPAM (default: the host name)")
	f.IntVar(&n.MTU, "mtu", 0, "pod interface MTU (default: the plugin's)")
	f.StringVar(&srcDir, "src-dir", "", "where the plugin binaries are (default: cni/ beside the podnet binary)")
	f.BoolVar(&noConfig, "no-config", false, "install the plugins only")
	f.BoolVar(&n.PortmapPlugin, "portmap-plugin", false, "publish host ports with podnet-portmap chained after podnet (one more exec per pod)")
	return cmd
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
