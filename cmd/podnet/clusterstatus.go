package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/podnet/podnet/agent/agentstatus"
	"github.com/podnet/podnet/agent/netpol"
	"github.com/podnet/podnet/clusterstatus"
	ipamkube "github.com/podnet/podnet/ipam/store/kube"
)

// clusterStatusOptions are `podnet status`'s flags for the cluster view.
type clusterStatusOptions struct {
	kubeconfig, namespace, selector, output string
	cluster, local                          bool
	port                                    int
	timeout                                 time.Duration
}

func (o *clusterStatusOptions) register(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file: report the cluster's agents, not this node's networks")
	f.BoolVar(&o.cluster, "cluster", false, "report the cluster with kubectl's config ($KUBECONFIG, ~/.kube/config)")
	f.BoolVar(&o.local, "local", false, "report this node's networks even where an in-cluster config exists")
	f.StringVar(&o.namespace, "namespace", "kube-system", "namespace of the agent DaemonSet's pods")
	f.StringVar(&o.selector, "selector", "app.kubernetes.io/name=podnet", "label selector of the agent pods")
	f.IntVar(&o.port, "agent-port", 9603, "the agents' metrics port, where they serve /status, when the pod names no port 'metrics'")
	f.DurationVar(&o.timeout, "agent-timeout", 5*time.Second, "how long to wait for each agent's /status")
	addOutputFlag(cmd, &o.output, outputText, outputJSON)
}

// wantCluster is whether the command reports the cluster: asked for
// (--kubeconfig, --cluster), or run in a pod with a service account.
func (o *clusterStatusOptions) wantCluster() bool {
	if o.local {
		return false
	}
	return o.kubeconfig != "" || o.cluster || os.Getenv("KUBERNETES_SERVICE_HOST") != ""
}

// runCluster reads the cluster, judges it and writes the report; a
// problem makes it exit 1, an error reading the cluster 2 (printed).
func (o *clusterStatusOptions) runCluster(cmd *cobra.Command) error {
	rc, err := kubeRESTConfig(o.kubeconfig, true)
	if err != nil {
		return err
	}
	ctx := cmd.Context()
	in, err := readCluster(ctx, rc, o)
	if err != nil {
		return err
	}
	r := clusterstatus.Judge(in)
	out := cmd.OutOrStdout()
	if o.output == "json" {
		err = clusterstatus.WriteJSON(out, r)
	} else {
		err = clusterstatus.WriteText(out, r)
	}
	if err != nil {
		return err
	}
	if !r.OK() {
		return exitCode(1)
	}
	return nil
}

// readCluster lists the Nodes and the agent pods, asks every running
// agent for its /status through the API server's pod proxy, and reads
// the control objects.
func readCluster(ctx context.Context, rc *rest.Config, o *clusterStatusOptions) (clusterstatus.Input, error) {
	in := clusterstatus.Input{Namespace: o.namespace, Selector: o.selector}
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return in, err
	}
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return in, fmt.Errorf("list Nodes: %w", err)
	}
	for i := range nodes.Items {
		in.Nodes = append(in.Nodes, nodeOf(&nodes.Items[i]))
	}
	pods, err := cs.CoreV1().Pods(o.namespace).List(ctx, metav1.ListOptions{LabelSelector: o.selector})
	if err != nil {
		return in, fmt.Errorf("list the agent pods (namespace %s, %s): %w", o.namespace, o.selector, err)
	}
	in.Agents = make([]clusterstatus.Agent, len(pods.Items))
	var wg sync.WaitGroup
	for i := range pods.Items {
		p := &pods.Items[i]
		in.Agents[i] = agentOf(p)
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		wg.Go(func() {
			in.Agents[i].Status, in.Agents[i].StatusError = agentDocument(ctx, cs, p, o)
		})
	}
	in.Control = readControl(ctx, cs, rc)
	wg.Wait()
	return in, nil
}

// agentDocument is the agent's /status, through the API server's pod
// proxy: no port-forward, and only the API server needs to reach the
// node.
func agentDocument(ctx context.Context, cs kubernetes.Interface, p *corev1.Pod, o *clusterStatusOptions) (*agentstatus.Document, string) {
	port := strconv.Itoa(o.port)
	for _, c := range p.Spec.Containers {
		for _, cp := range c.Ports {
			if cp.Name == "metrics" {
				port = strconv.Itoa(int(cp.ContainerPort))
			}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	b, err := cs.CoreV1().Pods(p.Namespace).ProxyGet("http", p.Name, port, agentstatus.Path, nil).DoRaw(ctx)
	if err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Sprintf("the agent serves no %s on port %s (an older podnet?)", agentstatus.Path, port)
		}
		return nil, fmt.Sprintf("GET %s on port %s through the API server: %v", agentstatus.Path, port, err)
	}
	var d agentstatus.Document
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, fmt.Sprintf("%s on port %s: not a status document: %v", agentstatus.Path, port, err)
	}
	return &d, ""
}

func nodeOf(n *corev1.Node) clusterstatus.Node {
	out := clusterstatus.Node{Name: n.Name, PodCIDRs: n.Spec.PodCIDRs, NotReadyReason: "no Ready condition"}
	if len(out.PodCIDRs) == 0 && n.Spec.PodCIDR != "" {
		out.PodCIDRs = []string{n.Spec.PodCIDR}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			out.Ready, out.NotReadyReason = c.Status == corev1.ConditionTrue, strings.TrimSpace(c.Reason+" "+c.Message)
		}
	}
	if out.Ready {
		out.NotReadyReason = ""
	}
	return out
}

// agentOf is what the pod says of its agent container.
func agentOf(p *corev1.Pod) clusterstatus.Agent {
	a := clusterstatus.Agent{Pod: p.Name, Node: p.Spec.NodeName, Phase: string(p.Status.Phase), Deleting: p.DeletionTimestamp != nil}
	for _, c := range p.Status.Conditions {
		switch {
		case c.Type == corev1.PodReady:
			a.Ready = c.Status == corev1.ConditionTrue
		case c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse:
			a.Unschedulable = strings.TrimSpace(c.Reason + ": " + c.Message)
		}
	}
	for _, cs := range p.Status.ContainerStatuses {
		if cs.Name != "agent" && len(p.Status.ContainerStatuses) > 1 {
			continue
		}
		a.Restarts = cs.RestartCount
		a.Container = containerState(cs.State)
		if t := cs.LastTerminationState.Terminated; t != nil {
			a.LastTermination = terminated(t)
		}
	}
	return a
}

func containerState(s corev1.ContainerState) string {
	switch {
	case s.Waiting != nil:
		return strings.TrimSpace("waiting: " + s.Waiting.Reason + " " + firstLine(s.Waiting.Message))
	case s.Terminated != nil:
		return "terminated: " + terminated(s.Terminated)
	case s.Running != nil:
		return "running"
	}
	return ""
}

// terminated is a termination in words: reason, exit code, and the
// last line of its message (the agent's error, with
// terminationMessagePolicy FallbackToLogsOnError); for a process killed
// by a signal the signal instead, since its last log line says nothing
// of why.
func terminated(t *corev1.ContainerStateTerminated) string {
	s := fmt.Sprintf("%s, exit code %d", t.Reason, t.ExitCode)
	if t.ExitCode > 128 && t.ExitCode < 160 {
		return s + fmt.Sprintf(" (killed by signal %d)", t.ExitCode-128)
	}
	if m := lastLine(t.Message); m != "" {
		s += ": " + m
	}
	return s
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
}

// readControl asks discovery which podnet.io and ClusterNetworkPolicy
// resources are served, and lists the pools and (metadata only) the
// blocks of block IPAM on the API.
func readControl(ctx context.Context, cs kubernetes.Interface, rc *rest.Config) clusterstatus.Control {
	var c clusterstatus.Control
	gv := ipamkube.Group + "/" + ipamkube.Version
	if l, err := cs.Discovery().ServerResourcesForGroupVersion(gv); err == nil {
		for _, r := range l.APIResources {
			if !strings.Contains(r.Name, "/") {
				c.IPAMCRDs = append(c.IPAMCRDs, r.Name)
			}
		}
	} else if !apierrors.IsNotFound(err) {
		c.Error = fmt.Sprintf("discovery of %s: %v", gv, err)
	}
	if l, err := cs.Discovery().ServerResourcesForGroupVersion(netpol.ClusterPolicyVersion.String()); err == nil {
		for _, r := range l.APIResources {
			c.ClusterNetworkPolicyCRD = c.ClusterNetworkPolicyCRD || r.Name == netpol.ClusterPolicyResource
		}
	}
	if len(c.IPAMCRDs) == 0 || c.Error != "" {
		return c
	}
	if err := listIPAM(ctx, rc, &c); err != nil {
		c.Error = err.Error()
	}
	return c
}

// listIPAM lists the pools and blocks of the default key set (objects
// without the set label).
func listIPAM(ctx context.Context, rc *rest.Config, c *clusterstatus.Control) error {
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return err
	}
	opts := metav1.ListOptions{LabelSelector: "!" + ipamkube.LabelSet}
	res := func(plural string) dynamic.ResourceInterface {
		return dc.Resource(schema.GroupVersionResource{Group: ipamkube.Group, Version: ipamkube.Version, Resource: plural})
	}
	pools, err := res("ippools").List(ctx, opts)
	if err != nil {
		return fmt.Errorf("list ippools: %w", err)
	}
	for _, p := range pools.Items {
		c.Pools = append(c.Pools, poolOf(p))
	}
	// Blocks carry every allocation: their metadata is enough.
	mc, err := metadata.NewForConfig(rc)
	if err != nil {
		return err
	}
	blocks, err := mc.Resource(schema.GroupVersionResource{Group: ipamkube.Group, Version: ipamkube.Version, Resource: "ipamblocks"}).List(ctx, opts)
	if err != nil {
		return fmt.Errorf("list ipamblocks: %w", err)
	}
	for _, b := range blocks.Items {
		c.Blocks = append(c.Blocks, clusterstatus.Block{Name: b.GetName(), Node: b.GetLabels()[ipamkube.LabelNode]})
	}
	return nil
}

func poolOf(u unstructured.Unstructured) clusterstatus.Pool {
	name, _, _ := unstructured.NestedString(u.Object, "spec", "name")
	cidr, _, _ := unstructured.NestedString(u.Object, "spec", "cidr")
	bs, _, _ := unstructured.NestedInt64(u.Object, "spec", "blockSize")
	sel, _, _ := unstructured.NestedString(u.Object, "spec", "nodeSelector")
	dis, _, _ := unstructured.NestedBool(u.Object, "spec", "disabled")
	if name == "" {
		name = u.GetName()
	}
	return clusterstatus.Pool{Name: name, CIDR: cidr, BlockSize: int(bs), NodeSelector: sel, Disabled: dis}
}
