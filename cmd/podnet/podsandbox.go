package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/netplugin"
	"github.com/podnet/podnet/sandbox"
)

// podList is `pod ls -o json`.
type podList struct {
	Pods []podEntry `json:"pods"`
	// Error is why some records could not be read (the others are
	// listed).
	Error string `json:"error,omitempty"`
}

// podEntry is a sandbox's record and whether its namespace still
// exists: running, or netns-gone.
type podEntry struct {
	*sandbox.Sandbox
	State string `json:"state"`
}

func newPodLsCommand(opts *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "ls",
		Short: "List the pod sandboxes podnet created, with their networks and addresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			all, err := sandbox.NewStore(opts.stateDir).List()
			rep := podList{Pods: []podEntry{}}
			for _, sb := range all {
				state := "running"
				if !sb.Alive() {
					state = "netns-gone"
				}
				rep.Pods = append(rep.Pods, podEntry{Sandbox: sb, State: state})
			}
			if err != nil {
				rep.Error = err.Error()
			}
			if werr := writeOutput(cmd.OutOrStdout(), output, rep); werr != nil {
				return werr
			}
			return err
		},
	}
	addOutputFlag(cmd, &output, outputTable, outputJSON)
	return cmd
}

func (r podList) writeText(out io.Writer) error {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "NAME\tNAMESPACE\tNETWORK\tIPS\tNETNS\tSTATE\tCREATED")
	for _, p := range r.Pods {
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", p.Name, p.Namespace, orDash(p.Network), orDash(strings.Join(p.IPs, ",")), p.NetNS, p.State, p.Created.Format("2006-01-02T15:04:05Z"))
	}
	return w.Flush()
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// podRmReport is `pod rm -o json`: the sandboxes removed, and the
// errors of those that could not be (exit status 1 then).
type podRmReport struct {
	Removed []string `json:"removed"`
	Errors  []string `json:"errors"`
}

func (r podRmReport) writeText(w io.Writer) error {
	for _, name := range r.Removed {
		if _, err := fmt.Fprintln(w, name); err != nil {
			return err
		}
	}
	return nil
}

func newPodRmCommand(opts *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:               "rm NAME...",
		Short:             "Tear down pod sandboxes podnet created: their networks, namespaces and records",
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeSandboxes(opts),
		RunE: func(cmd *cobra.Command, names []string) error {
			env, err := opts.podEnv("", false)
			if err != nil {
				return err
			}
			defer env.close()
			ctx, cancel := opts.context(cmd)
			defer cancel()
			var errs []error
			rep := podRmReport{Removed: []string{}}
			for _, name := range names {
				if err := removeSandbox(ctx, env, name); err != nil {
					errs = append(errs, err)
					continue
				}
				rep.Removed = append(rep.Removed, name)
			}
			rep.Errors = errorStrings(errs)
			if err := writeOutput(cmd.OutOrStdout(), output, rep); err != nil {
				return err
			}
			return errors.Join(errs...)
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// removeSandbox tears down the named sandbox's network and deletes it.
func removeSandbox(ctx context.Context, env *podEnv, name string) error {
	sb, err := env.store.Get(name)
	if err != nil {
		return err
	}
	if err := env.manager.TearDownPod(ctx, podRef(sb), sb.ID); err != nil {
		return err
	}
	return env.store.Delete(name)
}

// gcReport is `pod gc -o json`. Without NETWORK: the stale sandbox
// records removed; with it: the network's attachments kept and removed.
type gcReport struct {
	Network            string `json:"network,omitempty"`
	StaleRecords       int    `json:"staleRecordsRemoved"`
	AttachmentsKept    int    `json:"attachmentsKept"`
	AttachmentsRemoved int    `json:"attachmentsRemoved"`
}

func (r gcReport) writeText(w io.Writer) error {
	var err error
	if r.Network != "" {
		_, err = fmt.Fprintf(w, "network %q: %d attachment(s) kept, %d removed\n", r.Network, r.AttachmentsKept, r.AttachmentsRemoved)
	} else {
		_, err = fmt.Fprintf(w, "%d stale sandbox record(s) removed\n", r.StaleRecords)
	}
	return err
}

func newPodGCCommand(opts *globalOptions) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "gc [NETWORK]",
		Short: "Release attachments whose sandbox is gone",
		Long: `Without NETWORK: remove the records of podnet sandboxes whose namespace is
gone, and release every cached attachment of a podnet sandbox that no longer
exists, in every network (attachments other runtimes made are left alone).

With NETWORK: like cnitool's gc, release the cached attachments of that
network whose namespace no longer exists, then send GC to its plugins.`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: maxArgs(1, completeNetworks(opts)),
		RunE: func(cmd *cobra.Command, args []string) error {
			var rep gcReport
			var err error
			if len(args) == 1 {
				rep, err = gcNetwork(cmd, opts, args[0])
			} else {
				rep, err = gcSandboxes(cmd, opts)
			}
			if rep == (gcReport{}) && err != nil {
				return err
			}
			return errors.Join(writeOutput(cmd.OutOrStdout(), output, rep), err)
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// gcSandboxes removes the records of sandboxes whose namespace is gone and
// has the plugin manager release their attachments.
func gcSandboxes(cmd *cobra.Command, opts *globalOptions) (gcReport, error) {
	var rep gcReport
	ctx, cancel := opts.context(cmd)
	defer cancel()
	env, err := opts.podEnv("", false)
	if err != nil {
		return rep, err
	}
	defer env.close()
	all, listErr := env.store.List()
	var valid []string
	for _, sb := range all {
		if sb.Alive() {
			valid = append(valid, sb.ID)
			continue
		}
		if err := env.store.Delete(sb.Name); err != nil {
			listErr = errors.Join(listErr, err)
		}
		rep.StaleRecords++
	}
	// Attachments that other runtimes made are not podnet's to judge:
	// they count as valid.
	cached, err := env.plugin.Runtime().CachedAttachments("", "")
	if err != nil {
		return rep, err
	}
	for _, a := range cached {
		if !strings.HasPrefix(a.ContainerID, sandbox.NamePrefix) {
			valid = append(valid, a.ContainerID)
		}
	}
	if err := env.manager.GC(ctx, valid); err != nil {
		return gcReport{}, errors.Join(listErr, err)
	}
	return rep, listErr
}

// gcNetwork is cnitool-style GC of one network.
func gcNetwork(cmd *cobra.Command, opts *globalOptions, name string) (gcReport, error) {
	ctx, cancel := opts.context(cmd)
	defer cancel()
	list, err := opts.network(name)
	if err != nil {
		return gcReport{}, err
	}
	rt := opts.runtime()
	cached, err := rt.CachedAttachments("", list.Name)
	if err != nil {
		return gcReport{}, err
	}
	var valid []cni.GCAttachment
	for _, a := range cached {
		if _, err := os.Stat(a.NetNS); err == nil && a.NetNS != "" {
			valid = append(valid, cni.GCAttachment{ContainerID: a.ContainerID, IfName: a.IfName})
		}
	}
	if err := rt.GCNetworkList(ctx, list, valid); err != nil {
		return gcReport{}, err
	}
	return gcReport{Network: list.Name, AttachmentsKept: len(valid), AttachmentsRemoved: len(cached) - len(valid)}, nil
}

// localStatus is `status -o json` for this node (without a cluster).
type localStatus struct {
	// DefaultNetwork is the network pods get, nil when the conf dir has
	// none.
	DefaultNetwork *netEntry `json:"defaultNetwork"`
	ConfDir        string    `json:"confDir"`
	Broken         []string  `json:"broken"`
	Ready          bool      `json:"ready"`
	// NotReady is why pods cannot be set up.
	NotReady string `json:"notReady,omitempty"`
}

func (r localStatus) writeText(out io.Writer) error {
	if n := r.DefaultNetwork; n != nil {
		fmt.Fprintf(out, "default network: %s (%s, cniVersion %s, plugins %s)\n", n.Name, n.File, n.CNIVersion, strings.Join(n.Plugins, ","))
	} else {
		fmt.Fprintf(out, "default network: none in %s\n", r.ConfDir)
	}
	for _, b := range r.Broken {
		fmt.Fprintf(out, "broken: %s\n", b)
	}
	if !r.Ready {
		_, err := fmt.Fprintf(out, "ready: no: %s\n", r.NotReady)
		return err
	}
	_, err := fmt.Fprintln(out, "ready: yes")
	return err
}

// readLocalStatus is whether this node can set up pods, and its networks.
func readLocalStatus(opts *globalOptions) (localStatus, error) {
	env, err := opts.podEnv("", false)
	if err != nil {
		return localStatus{}, err
	}
	defer env.close()
	def, broken := env.plugin.Networks()
	rep := localStatus{ConfDir: opts.confDir, Broken: errorStrings(broken), Ready: true}
	if def != nil {
		rep.DefaultNetwork = &netEntry{Name: def.Name, CNIVersion: def.CNIVersion, Plugins: pluginList(def), File: def.Path}
	}
	if err := env.plugin.Status(); err != nil {
		rep.Ready, rep.NotReady = false, err.Error()
	}
	return rep, nil
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
			rep, err := readLocalStatus(opts)
			if err != nil {
				return err
			}
			if err := writeOutput(cmd.OutOrStdout(), co.output, rep); err != nil {
				return err
			}
			if !rep.Ready {
				return exitCode(1)
			}
			return nil
		},
	}
	co.register(cmd)
	return cmd
}

func podRef(sb *sandbox.Sandbox) netplugin.PodRef {
	return netplugin.PodRef{Namespace: sb.Namespace, Name: sb.Name}
}
