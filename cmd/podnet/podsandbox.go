package main

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netplugin"
	"github.com/podnet/podnet/sandbox"
)

func newPodLsCommand(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List the pod sandboxes podnet created, with their networks and addresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := sandbox.NewStore(opts.stateDir).List()
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "NAME\tNAMESPACE\tNETWORK\tIPS\tNETNS\tSTATE\tCREATED")
			for _, sb := range all {
				state := "running"
				if !sb.Alive() {
					state = "netns-gone"
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sb.Name, sb.Namespace, orDash(sb.Network), orDash(strings.Join(sb.IPs, ",")), sb.NetNS, state, sb.Created.Format("2006-01-02T15:04:05Z"))
			}
			w.Flush()
			return err
		},
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func newPodRmCommand(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "rm NAME...",
		Short: "Tear down pod sandboxes podnet created: their networks, namespaces and records",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, names []string) error {
			env, err := opts.podEnv("", false)
			if err != nil {
				return err
			}
			defer env.close()
			ctx, cancel := opts.context(cmd)
			defer cancel()
			var errs []error
			for _, name := range names {
				sb, err := env.store.Get(name)
				if err != nil {
					errs = append(errs, err)
					continue
				}
				if err := env.manager.TearDownPod(ctx, podRef(sb), sb.ID); err != nil {
					errs = append(errs, err)
					continue
				}
				if err := env.store.Delete(name); err != nil {
					errs = append(errs, err)
					continue
				}
				fmt.Fprintln(cmd.OutOrStdout(), name)
			}
			return errors.Join(errs...)
		},
	}
}

func newPodGCCommand(opts *globalOptions) *cobra.Command {
	return &cobra.Command{
		Use:   "gc [NETWORK]",
		Short: "Release attachments whose sandbox is gone",
		Long: `Without NETWORK: remove the records of podnet sandboxes whose namespace is
gone, and release every cached attachment of a podnet sandbox that no longer
exists, in every network (attachments other runtimes made are left alone).

With NETWORK: like cnitool's gc, release the cached attachments of that
network whose namespace no longer exists, then send GC to its plugins.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := opts.context(cmd)
			defer cancel()
			if len(args) == 1 {
				return gcNetwork(cmd, opts, args[0])
			}
			env, err := opts.podEnv("", false)
			if err != nil {
				return err
			}
			defer env.close()
			all, listErr := env.store.List()
			var valid []string
			removed := 0
			for _, sb := range all {
				if sb.Alive() {
					valid = append(valid, sb.ID)
					continue
				}
				if err := env.store.Delete(sb.Name); err != nil {
					listErr = errors.Join(listErr, err)
				}
				removed++
			}
			// Attachments that other runtimes made are not podnet's to
			// judge: they count as valid.
			cached, err := env.plugin.Runtime().CachedAttachments("", "")
			if err != nil {
				return err
			}
			for _, a := range cached {
				if !strings.HasPrefix(a.ContainerID, sandbox.NamePrefix) {
					valid = append(valid, a.ContainerID)
				}
			}
			if err := env.manager.GC(ctx, valid); err != nil {
				return errors.Join(listErr, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%d stale sandbox record(s) removed\n", removed)
			return listErr
		},
	}
}

// gcNetwork is cnitool-style GC of one network.
func gcNetwork(cmd *cobra.Command, opts *globalOptions, name string) error {
	ctx, cancel := opts.context(cmd)
	defer cancel()
	list, err := opts.network(name)
	if err != nil {
		return err
	}
	rt := opts.runtime()
	cached, err := rt.CachedAttachments("", list.Name)
	if err != nil {
		return err
	}
	var valid []cni.GCAttachment
	for _, a := range cached {
		if _, err := os.Stat(a.NetNS); err == nil && a.NetNS != "" {
			valid = append(valid, cni.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	if err := rt.GCNetworkList(ctx, list, valid); err != nil {
		return err
	}
	fmt.Fprintf(cmd.OutOrStdout(), "network %q: %d attachment(s) kept, %d removed\n", list.Name, len(valid), len(cached)-len(valid))
	return nil
}

func newStatusCommand(opts *globalOptions) *cobra.Command {
	var co clusterStatusOptions
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Print the cluster's agents and what is wrong (with --kubeconfig, --cluster or in a pod), else this node's networks",
		Long: `status has two views.

With --kubeconfig, --cluster, or run in a pod (an in-cluster config), it
reports the cluster: every Node's agent (the DaemonSet's pod, ready or not
and why, and the agent's own /status read through the API server's pod
proxy: version, datastore and IPAM model, routing mode, encryption, policy
sync age and rules, pod attachments), the control objects (the podnet.io
and ClusterNetworkPolicy CRDs, pools and blocks), and what is wrong, in
words. It exits 1 when something is wrong. The user needs to list Nodes,
list pods in the agents' namespace, get pods/proxy there, and (block IPAM)
list ippools and ipamblocks (docs/observability.md).

Otherwise (or with --local) it reports this node: whether pods can be set
up (the network plugin's Status) and the loaded networks.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if co.wantCluster() {
				return co.runCluster(cmd)
			}
			env, err := opts.podEnv("", false)
			if err != nil {
				return err
			}
			defer env.close()
			out := cmd.OutOrStdout()
			def, broken := env.plugin.Networks()
			if def != nil {
				fmt.Fprintf(out, "default network: %s (%s, cniVersion %s, plugins %s)\n", def.Name, def.Path, def.CNIVersion, pluginTypes(def))
			} else {
				fmt.Fprintf(out, "default network: none in %s\n", opts.confDir)
			}
			for _, b := range broken {
				fmt.Fprintf(out, "broken: %v\n", b)
			}
			if err := env.plugin.Status(); err != nil {
				fmt.Fprintf(out, "ready: no: %v\n", err)
				return exitCode(1)
			}
			fmt.Fprintln(out, "ready: yes")
			return nil
		},
	}
	co.register(cmd)
	return cmd
}

func podRef(sb *sandbox.Sandbox) netplugin.PodRef {
	return netplugin.PodRef{Namespace: sb.Namespace, Name: sb.Name}
}
