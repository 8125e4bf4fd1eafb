package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/client-go/kubernetes"

	"github.com/podnet/podnet/connectivity"
)

func newConnectivityCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "connectivity", Short: "Test a cluster's pod network end to end"}
	var kubeconfig string
	cmd.PersistentFlags().StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig of the cluster (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
	cmd.AddCommand(newConnectivityTestCommand(&kubeconfig), newConnectivityCleanupCommand(&kubeconfig))
	return cmd
}

func newConnectivityTestCommand(kubeconfig *string) *cobra.Command {
	var (
		opt     connectivity.Options
		output  string
		timeout time.Duration
	)
	cmd := &cobra.Command{
		Use:   "test",
		Short: "Check pod to pod, Services, DNS, egress and NetworkPolicy in a namespace of its own",
		Long:  connectivityTestLong,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConnectivityTest(cmd, *kubeconfig, opt, output, timeout)
		},
	}
	f := cmd.Flags()
	f.StringVar(&opt.Image, "image", defaultImage(), "image with podnet at /opt/podnet/bin/podnet, for the servers and probers")
	f.DurationVar(&opt.CheckTimeout, "check-timeout", time.Minute, "deadline of one check (its pod's start, the probe, its end)")
	f.DurationVar(&opt.RetryFor, "retry-for", 15*time.Second, "a probe retries until its expected outcome for this long")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "deadline of the whole run (the namespace is deleted after it)")
	addOutputFlag(cmd, &output, outputTable, outputJSON)
	return cmd
}

func runConnectivityTest(cmd *cobra.Command, kubeconfig string, opt connectivity.Options, output string, timeout time.Duration) error {
	if opt.Image == "" {
		return fmt.Errorf("--image: empty")
	}
	if opt.RetryFor < 0 || opt.CheckTimeout <= opt.RetryFor {
		return fmt.Errorf("--check-timeout %s must be longer than --retry-for %s (a check includes its pod's start and the retries)", opt.CheckTimeout, opt.RetryFor)
	}
	cfg, err := kubeRESTConfig(kubeconfig, true)
	if err != nil {
		return err
	}
	// A check polls its pod twice a second, a dozen at once:
	// client-go's default 5 requests/s would throttle them.
	cfg.QPS, cfg.Burst = 50, 100
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	opt.Log = cmd.ErrOrStderr()
	ctx := cmd.Context()
	if timeout > 0 {
		var cancel func()
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	rep, runErr := connectivity.Run(ctx, cs, opt)
	if rep == nil {
		return runErr
	}
	if output == outputJSON {
		err = writeJSON(cmd.OutOrStdout(), rep)
	} else {
		err = rep.WriteText(cmd.OutOrStdout())
	}
	if runErr != nil {
		return runErr
	}
	if err != nil {
		return err
	}
	if !rep.OK() {
		return exitCode(1)
	}
	return nil
}

func newConnectivityCleanupCommand(kubeconfig *string) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "cleanup",
		Short: "Delete the namespaces that killed connectivity tests left (label podnet.io/connectivity-test)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := kubeRESTConfig(*kubeconfig, true)
			if err != nil {
				return err
			}
			cs, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			names, err := connectivity.Leftovers(cmd.Context(), cs)
			if err != nil {
				return err
			}
			for _, ns := range names {
				if err := connectivity.DeleteNamespace(cs, ns, 2*time.Minute); err != nil {
					return err
				}
			}
			return writeOutput(cmd.OutOrStdout(), output, cleanupReport{Deleted: append([]string{}, names...)})
		},
	}
	addOutputFlag(cmd, &output, outputText, outputJSON)
	return cmd
}

// cleanupReport is `connectivity cleanup -o json`: the namespaces
// deleted.
type cleanupReport struct {
	Deleted []string `json:"deleted"`
}

func (r cleanupReport) writeText(w io.Writer) error {
	_, err := fmt.Fprintf(w, "deleted %d namespaces %v\n", len(r.Deleted), r.Deleted)
	return err
}

const connectivityTestLong = `Create a namespace podnet-connectivity-<random> (label
podnet.io/connectivity-test) with a server pod on each of two
schedulable Ready nodes and a Service in front of one, then run one
short-lived prober pod ('podnet diag probe' in --image) per check: pod to
pod on one node and across nodes (TCP and UDP, and that the server saw
the client's own address: no SNAT between pods), ClusterIP, NodePort,
hostPort, DNS (the Service's name to its ClusterIP), TCP to the nodes'
kubelet port, and NetworkPolicy (a deny, an allow beside it, both
removed, then an egress deny and its removal). Print a table with each
check's result and time; delete the namespace at the end, also on
failure and on SIGINT, and wait until it is gone.

It runs on any cluster. Where podnet does not run (or runs without
NetworkPolicy), a policy that did not block is reported "not judged", as
is a hostPort that did not answer: nothing says that network should.
A policy probe that was blocked while the same target was unreachable
without any policy too is "not judged" everywhere: the policy is not
what blocked it.
With one usable node the checks across nodes are "not run". Exit status
1 when a check failed or the run was interrupted.`
