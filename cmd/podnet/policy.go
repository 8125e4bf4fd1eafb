package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/agent/netpol"
	"github.com/podnet/podnet/policy/explain"
)

func newPolicyCommand(opts *globalOptions) *cobra.Command {
	cmd := &cobra.Command{Use: "policy", Short: "NetworkPolicy and ClusterNetworkPolicy as podnet enforces them"}
	cmd.AddCommand(newPolicyExplainCommand(opts))
	return cmd
}

func newPolicyExplainCommand(opts *globalOptions) *cobra.Command {
	var (
		q          explain.Query
		kubeconfig string
		output     string
	)
	cmd := &cobra.Command{
		Use:   "explain SOURCE DESTINATION --port PORT",
		Short: "Say whether policy allows SOURCE to reach DESTINATION on a port, and which policy and rule decide it",
		Long: `Say whether NetworkPolicy and ClusterNetworkPolicy allow a connection,
and why, for the source's egress and the destination's ingress (both must
allow): which ClusterNetworkPolicy rule of the Admin tier decided (Accept,
Deny) or passed, which NetworkPolicies isolate the pod and which of their
rules allow, which Baseline rule decided when no NetworkPolicy isolates
it; and for every rule read, which peer and which port matched.

SOURCE and DESTINATION are namespace/pod or an IP address (a pod's address
is that pod; any other is judged by ipBlock or networks). PORT is a number
or the name of one of the destination pod's container ports. The answer is
computed from the API's Pods, Namespaces, NetworkPolicies,
ClusterNetworkPolicies and Nodes (one list each), as the agent compiles
them; it does not read any node's rules. Without the ClusterNetworkPolicy
CRD, or the right to list them, the answer is NetworkPolicy's alone, and
says so.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			q.Source, q.Destination = args[0], args[1]
			rc, err := kubeRESTConfig(kubeconfig, true)
			if err != nil {
				return err
			}
			ctx, cancel := opts.context(cmd)
			defer cancel()
			c, err := listCluster(ctx, rc)
			if err != nil {
				return err
			}
			rep, err := explain.Build(c, q)
			if err != nil {
				return err
			}
			return writeReport(cmd.OutOrStdout(), rep, output)
		},
	}
	f := cmd.Flags()
	f.StringVar(&q.Port, "port", "", "destination port: a number, or the name of a container port of the destination pod")
	f.StringVar(&q.Protocol, "protocol", "TCP", "TCP, UDP or SCTP")
	f.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, else the in-cluster config)")
	addOutputFlag(cmd, &output, outputText, outputJSON)
	_ = cmd.MarkFlagRequired("port")
	return cmd
}

func writeReport(w io.Writer, rep *explain.Report, output string) error {
	if output == "json" {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return rep.WriteText(w)
}

// listCluster lists what explain reads, one request each. Pods that have
// finished are left out, as the agent leaves them out. Nodes a user may
// not list are done without, and so are ClusterNetworkPolicies when the
// API server does not serve them or the user may not list them (the
// report says so).
func listCluster(ctx context.Context, rc *rest.Config) (*explain.Cluster, error) {
	core, netv1, err := netpol.NewRESTClients(rc, "podnet-cli", nil)
	if err != nil {
		return nil, err
	}
	var (
		pods     corev1.PodList
		nss      corev1.NamespaceList
		policies networkingv1.NetworkPolicyList
		nodes    corev1.NodeList
	)
	if err := core.Get().Resource("pods").Param("fieldSelector", netpol.UnfinishedPods).Do(ctx).Into(&pods); err != nil {
		return nil, fmt.Errorf("list pods: %w", err)
	}
	if err := core.Get().Resource("namespaces").Do(ctx).Into(&nss); err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	if err := netv1.Get().Resource("networkpolicies").Do(ctx).Into(&policies); err != nil {
		return nil, fmt.Errorf("list networkpolicies: %w", err)
	}
	if err := core.Get().Resource("nodes").Do(ctx).Into(&nodes); err != nil && !apierrors.IsForbidden(err) {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	c := &explain.Cluster{Pods: pods.Items, Namespaces: nss.Items, Policies: policies.Items, Nodes: nodes.Items}
	cnpc, err := netpol.NewClusterPolicyClient(rc, "podnet-cli", nil)
	if err != nil {
		return nil, err
	}
	var cnps cnpv1beta1.ClusterNetworkPolicyList
	switch err := cnpc.Get().Resource(netpol.ClusterPolicyResource).Do(ctx).Into(&cnps); {
	case apierrors.IsNotFound(err):
		c.ClusterPoliciesUnread = "the API server does not serve them: their CRD is not installed"
	case apierrors.IsForbidden(err):
		c.ClusterPoliciesUnread = "not allowed to list them"
	case err != nil:
		return nil, fmt.Errorf("list clusternetworkpolicies: %w", err)
	default:
		c.ClusterPolicies = cnps.Items
	}
	return c, nil
}
