package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/internal/sysctlrecord"
	"github.com/podnet/podnet/nodeclean"
	"github.com/podnet/podnet/nodeclean/kubeclean"
)

// defaultSysctlRecord is where the agent records the sysctls it changes,
// and where uninstall finds them.
var defaultSysctlRecord = filepath.Join(nodeclean.DefaultStateDir, sysctlrecord.FileName)

// uninstallOptions are podnet uninstall's flags.
type uninstallOptions struct {
	paths  nodeclean.Paths
	dryRun bool
	verify bool
	hold   bool
	output string
	api    apiCleanOptions
}

// apiCleanOptions say what of the node to remove from the Kubernetes
// API (nodeclean/kubeclean).
type apiCleanOptions struct {
	datastore  string
	ipamModel  string
	node       string
	kubeconfig string
}

func (o *apiCleanOptions) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.datastore, "datastore", "", "kubernetes: also remove the node's podnet.io/ annotations from its Node (and with --ipam blocks its IPAM on the API), with the pod's in-cluster credentials or --kubeconfig")
	f.StringVar(&o.ipamModel, "ipam", ipamNodeCIDR, "with --datastore kubernetes: node-cidr, or blocks to remove the node's IPAMNode, its addresses and its blocks' affinity as podnet ipam node rm --release-addresses does (nothing to do where there is none)")
	f.StringVar(&o.node, "node", os.Getenv("NODE_NAME"), "with --datastore kubernetes: the node's name (default $NODE_NAME, else the host name)")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "with --datastore kubernetes: kubeconfig file (default: the pod's in-cluster config)")
}

// config is the kubeclean config, or nil without --datastore kubernetes.
func (o *apiCleanOptions) config() (*kubeclean.Config, error) {
	switch o.datastore {
	case "":
		if o.ipamModel != ipamNodeCIDR {
			return nil, errors.New("--ipam goes with --datastore kubernetes")
		}
		return nil, nil
	case "kubernetes":
	default:
		return nil, fmt.Errorf("--datastore %q: want kubernetes, or none for the node alone", o.datastore)
	}
	if o.ipamModel != ipamNodeCIDR && o.ipamModel != ipamBlocks {
		return nil, fmt.Errorf("--ipam %q: want %s or %s", o.ipamModel, ipamNodeCIDR, ipamBlocks)
	}
	node := o.node
	if node == "" {
		h, err := os.Hostname()
		if err != nil {
			return nil, fmt.Errorf("--node not set, $NODE_NAME empty, and no host name: %w", err)
		}
		node = h
	}
	rc, err := kubeRESTConfig(o.kubeconfig, false)
	if err != nil {
		return nil, err
	}
	return &kubeclean.Config{REST: rc, Node: node, Blocks: o.ipamModel == ipamBlocks}, nil
}

// uninstallReport is what the node had and, with --datastore
// kubernetes, what the API had of it.
type uninstallReport struct {
	nodeclean.Report
	// Verify says the report is --verify's: Steps are what is left.
	Verify bool     `json:"verify,omitempty"`
	API    []string `json:"api,omitempty"`
}

func (r uninstallReport) clean() bool { return r.Report.Clean() && len(r.API) == 0 }

func newUninstallCommand() *cobra.Command {
	var o uninstallOptions
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove podnet from this node: its network config, plugins, links, routes, nftables tables, state and sysctls",
		Long: `uninstall removes from this node what podnet put there, and nothing else:
first podnet's network config in --conf-dir (a config that runs the podnet
plugin, by content: other CNIs' configs stay), so that the runtime reports
the network not ready at once; then podnet's plugins in --bin-dir
(podnet, podnet-ipam, podnet-portmap, and loopback only when podnet built
it); the device podnet.vxlan with its neighbours and FDB entries, and
podnet.wg (kernel WireGuard) with its peers; every route of protocol 97; the nftables tables inet podnet, inet and bridge
podnet-guard, inet podnet-closed, inet podnet-policy and inet
podnet-portmap; everything in --state-dir (the IPAM file ipam.db, the WireGuard key) and
--run-dir (sockets, locks); podnet.wg's UAPI socket in --wireguard-dir when
an agent killed while it ran WireGuard in userspace left it (one an agent
still serves, other tools' sockets and the directory itself stay); and the sysctls the agent recorded changing,
restored to their values before podnet while they still hold podnet's.

Pods still running keep their veths, addresses and routes until they are
deleted. Running it again, or on a node without podnet, succeeds.

--verify changes nothing: it exits 0 when nothing of podnet is left, and
otherwise names what is and exits 1. --hold waits, after removing, until
SIGTERM: the uninstall DaemonSet's container (deploy/kubernetes/uninstall).
With --datastore kubernetes it also removes the Node's podnet.io/
annotations and, with --ipam blocks, the node's IPAMNode, its addresses
released and its blocks let go (as podnet ipam node rm
--release-addresses); --verify then checks them too.
`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&o.paths.ConfDir, "conf-dir", nodeclean.DefaultConfDir, "the node's CNI network config directory")
	f.StringVar(&o.paths.BinDir, "bin-dir", nodeclean.DefaultBinDir, "the node's CNI plugin directory")
	f.StringVar(&o.paths.StateDir, "state-dir", nodeclean.DefaultStateDir, "podnet's state directory (IPAM file, sysctl record): emptied")
	f.StringVar(&o.paths.RunDir, "run-dir", nodeclean.DefaultRunDir, "podnet's run directory (sockets, locks): emptied")
	f.StringVar(&o.paths.WireGuardDir, "wireguard-dir", nodeclean.DefaultWireGuardDir, "userspace WireGuard's socket directory: podnet.wg.sock removed if no agent serves it, the rest left (empty: not looked at)")
	f.BoolVar(&o.dryRun, "dry-run", false, "print what would be removed, change nothing")
	f.BoolVar(&o.verify, "verify", false, "change nothing; exit 0 only when nothing of podnet is left, else name what is and exit 1")
	f.BoolVar(&o.hold, "hold", false, "after removing, wait until SIGTERM (a DaemonSet's container)")
	addOutputFlag(cmd, &o.output, outputText, outputJSON)
	o.api.register(cmd)
	return cmd
}

func (o *uninstallOptions) run(cmd *cobra.Command) error {
	if o.verify && (o.dryRun || o.hold) {
		return errors.New("--verify goes with neither --dry-run nor --hold")
	}
	api, err := o.api.config()
	if err != nil {
		return err
	}
	var rep uninstallReport
	rep.Report, err = nodeclean.Remove(o.paths, o.dryRun || o.verify)
	if err != nil && rep.Steps == nil {
		return err
	}
	if o.verify {
		rep.DryRun, rep.Verify = false, true
	}
	if api != nil {
		ctx, cancel := context.WithTimeout(cmd.Context(), time.Minute)
		defer cancel()
		var apiErr error
		if o.dryRun || o.verify {
			rep.API, apiErr = kubeclean.Left(ctx, *api)
		} else {
			rep.API, apiErr = kubeclean.Remove(ctx, *api)
		}
		err = errors.Join(err, apiErr)
	}
	if perr := o.print(cmd, rep); perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if o.verify && !rep.clean() {
		return exitCode(1)
	}
	if o.hold {
		return holdUntilTerm(cmd)
	}
	return nil
}

// holdUntilTerm blocks until SIGTERM or SIGINT (main's context).
func holdUntilTerm(cmd *cobra.Command) error {
	ctx, stop := signal.NotifyContext(cmd.Context(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	<-ctx.Done()
	return nil
}

func (o *uninstallOptions) print(cmd *cobra.Command, rep uninstallReport) error {
	if o.output == outputJSON {
		return writeJSON(cmd.OutOrStdout(), rep)
	}
	w := cmd.OutOrStdout()
	verb := "removed"
	switch {
	case o.verify:
		verb = "left"
	case o.dryRun:
		verb = "would remove"
	}
	if rep.clean() {
		if o.verify {
			fmt.Fprintln(w, "clean: nothing of podnet is left on this node")
		} else {
			fmt.Fprintln(w, "nothing of podnet found on this node")
		}
	}
	for _, s := range rep.Steps {
		fmt.Fprintf(w, "%s: %s\n", verb, s)
	}
	for _, a := range rep.API {
		fmt.Fprintf(w, "%s: %s\n", verb, a)
	}
	for _, k := range rep.Kept {
		fmt.Fprintf(w, "kept: %s %s: %s\n", k.Kind, k.Target, k.Reason)
	}
	for _, e := range rep.Errors {
		fmt.Fprintf(w, "failed: %s\n", e)
	}
	return nil
}
