package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/flows/flowapi"
)

// flowsCommandOptions are podnet flows' flags.
type flowsCommandOptions struct {
	agents                                       []string
	kubeconfig, agentNamespace, selector, output string
	port                                         int
	timeout                                      time.Duration
	namespaces, pods, verdicts, protocols        []string
	ports, nodes, policies                       []string
	limit                                        int
	follow                                       bool
}

func newFlowsCommand() *cobra.Command {
	o := &flowsCommandOptions{}
	cmd := &cobra.Command{
		Use:   "flows",
		Short: "Show the cluster's flows with their policy verdicts (agents started with --flows)",
		Long: `flows prints the flow records of podnet's agents: each connection of a node's
pods at its start and end, and each burst of dropped packets, with the verdict
(forwarded, dropped-policy, dropped-guard) and the policy rules that decided it.

It reads every agent pod through the API server's pod proxy (--kubeconfig, else
kubectl's config, else in-cluster), or the agents named by --agent directly.
The records of the agents are merged by time; with --follow the new ones are
printed as they come, until interrupted. Filters select records whose source or
destination matches: --namespace shop --verdict dropped --follow.

An agent that cannot be read is reported on stderr, naming its node; the others
are printed. The exit code is 1 when none could be read.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	f := cmd.Flags()
	f.StringArrayVar(&o.agents, "agent", nil, "read this agent directly (http://HOST:9603; repeatable) instead of every agent pod")
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file (default: kubectl's, else in-cluster)")
	f.StringVar(&o.agentNamespace, "agent-namespace", "kube-system", "namespace of the agent DaemonSet's pods")
	f.StringVar(&o.selector, "selector", "app.kubernetes.io/name=podnet", "label selector of the agent pods")
	f.IntVar(&o.port, "agent-port", 9603, "the agents' metrics port, where they serve /flows, when the pod names no port 'metrics'")
	f.DurationVar(&o.timeout, "agent-timeout", 10*time.Second, "how long to wait for each agent's answer (with --follow: its first)")
	f.StringSliceVarP(&o.namespaces, "namespace", "n", nil, "flows with a pod of this namespace at either end (repeatable, or comma-separated)")
	f.StringSliceVar(&o.pods, "pod", nil, "flows of this pod, namespace/name or a name with one --namespace")
	f.StringSliceVar(&o.verdicts, "verdict", nil, "forwarded, dropped-policy, dropped-guard, or dropped (both drops)")
	f.StringSliceVar(&o.protocols, "protocol", nil, "tcp, udp, sctp, icmp, icmpv6 or a number")
	f.StringSliceVar(&o.ports, "port", nil, "flows with this port at either end")
	f.StringSliceVar(&o.nodes, "node", nil, "flows recorded by this node's agent")
	f.StringSliceVar(&o.policies, "policy", nil, "flows decided by a rule of this policy: namespace/name of a NetworkPolicy, the name of a ClusterNetworkPolicy")
	f.IntVar(&o.limit, "limit", flowapi.DefaultLimit, "the newest records to print (with --follow: before the live ones; 0 without --limit)")
	f.BoolVarP(&o.follow, "follow", "f", false, "print new records as they come, until interrupted")
	f.StringVarP(&o.output, "output", "o", "text", "text (a line a record) or json (NDJSON, a record a line)")
	return cmd
}

// filter is the flags' filter; an error names the flag.
func (o *flowsCommandOptions) filter() (flows.Filter, error) {
	q := url.Values{}
	for p, vs := range map[string][]string{flows.ParamNamespace: o.namespaces, flows.ParamPod: o.pods, flows.ParamVerdict: o.verdicts,
		flows.ParamProtocol: o.protocols, flows.ParamPort: o.ports, flows.ParamNode: o.nodes, flows.ParamPolicy: o.policies} {
		q[p] = vs
	}
	f, err := flows.ParseFilter(q)
	var pe *flows.ParamError
	if errors.As(err, &pe) {
		return f, fmt.Errorf("--%s %q: %s", pe.Param, pe.Value, pe.Want)
	}
	return f, err
}

// flowSource is one agent to read: its node (or URL), and its client or
// why it cannot be read.
type flowSource struct {
	name   string
	client *flowapi.Client
	err    error
}

func (o *flowsCommandOptions) run(cmd *cobra.Command) error {
	if o.output != "text" && o.output != "json" {
		return fmt.Errorf("-o %q: want text or json", o.output)
	}
	if o.limit < 0 {
		return fmt.Errorf("--limit %d: want 0 or more records", o.limit)
	}
	f, err := o.filter()
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	srcs, err := o.sources(ctx)
	if err != nil {
		return err
	}
	p := &flowPrinter{out: cmd.OutOrStdout(), errOut: cmd.ErrOrStderr(), json: o.output == "json"}
	var answered int
	if o.follow {
		limit := 0
		if cmd.Flags().Changed("limit") {
			limit = o.limit
		}
		answered = followFlows(ctx, srcs, flowapi.Query{Filter: f, Limit: limit, Follow: true}, p)
	} else {
		answered = listFlows(ctx, srcs, f, o.limit, p)
	}
	if answered == 0 {
		return exitCode(1)
	}
	return nil
}

// sources are the agents to read: --agent's, else every agent pod's
// proxy on the API server.
func (o *flowsCommandOptions) sources(ctx context.Context) ([]flowSource, error) {
	if len(o.agents) > 0 {
		var out []flowSource
		for _, a := range o.agents {
			u, err := url.Parse(a)
			if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
				return nil, fmt.Errorf("--agent %q: want http://HOST:PORT", a)
			}
			out = append(out, flowSource{name: a, client: &flowapi.Client{URL: a, Timeout: o.timeout}})
		}
		return out, nil
	}
	rc, err := kubeRESTConfig(o.kubeconfig, true)
	if err != nil {
		return nil, err
	}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	hc, err := rest.HTTPClientFor(rc)
	if err != nil {
		return nil, err
	}
	pods, err := cs.CoreV1().Pods(o.agentNamespace).List(ctx, metav1.ListOptions{LabelSelector: o.selector})
	if err != nil {
		return nil, fmt.Errorf("list the agent pods (namespace %s, %s): %w", o.agentNamespace, o.selector, err)
	}
	if len(pods.Items) == 0 {
		return nil, fmt.Errorf("no agent pods in namespace %s with %s (--agent-namespace, --selector)", o.agentNamespace, o.selector)
	}
	var out []flowSource
	for i := range pods.Items {
		out = append(out, o.podSource(cs, hc, &pods.Items[i]))
	}
	return out, nil
}

// podSource reads the agent pod p through the API server's pod proxy:
// no port-forward, and only the API server needs to reach the node. Its
// authenticated client sends the requests (rather than ProxyGet), so
// that the stream's headers and the agent's error text reach the CLI.
func (o *flowsCommandOptions) podSource(cs kubernetes.Interface, hc *http.Client, p *corev1.Pod) flowSource {
	name := p.Spec.NodeName
	if name == "" {
		name = "pod " + p.Name
	}
	if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return flowSource{name: name, err: fmt.Errorf("agent pod %s is %s", p.Name, strings.ToLower(string(p.Status.Phase)))}
	}
	port := strconv.Itoa(o.port)
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "metrics" {
				port = strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	u := cs.CoreV1().RESTClient().Get().Namespace(p.Namespace).Resource("pods").Name(p.Name + ":" + port).SubResource("proxy").URL()
	return flowSource{name: name, client: &flowapi.Client{URL: u.String(), HTTP: hc, Timeout: o.timeout}}
}

// flowPrinter writes records and agents' errors; it is used from one
// goroutine at a time.
type flowPrinter struct {
	out, errOut io.Writer
	json        bool
}

func (p *flowPrinter) record(r flows.Record) error {
	if p.json {
		return json.NewEncoder(p.out).Encode(r)
	}
	_, err := fmt.Fprintln(p.out, flowLine(r))
	return err
}

func (p *flowPrinter) failed(src string, err error) {
	fmt.Fprintf(p.errOut, "podnet flows: %s: %v\n", src, err)
}

// report writes each agent's error and returns how many answered.
func (p *flowPrinter) report(srcs []flowSource, errs []error) int {
	answered := 0
	for i, err := range errs {
		if err != nil {
			p.failed(srcs[i].name, err)
		} else {
			answered++
		}
	}
	return answered
}

// listFlows prints the newest limit records of every agent, merged by
// time; it returns how many agents answered.
func listFlows(ctx context.Context, srcs []flowSource, f flows.Filter, limit int, p *flowPrinter) int {
	lists := make([][]flows.Record, len(srcs))
	errs := make([]error, len(srcs))
	var wg sync.WaitGroup
	for i, s := range srcs {
		if s.err != nil {
			errs[i] = s.err
			continue
		}
		wg.Go(func() { lists[i], errs[i] = s.client.List(ctx, f, max(limit, 1)) })
	}
	wg.Wait()
	answered := p.report(srcs, errs)
	if limit == 0 {
		return answered
	}
	for _, r := range mergeFlows(lists, limit) {
		if p.record(r) != nil {
			break
		}
	}
	return answered
}
