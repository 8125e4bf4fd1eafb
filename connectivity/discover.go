package connectivity

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// node is a node the run places pods on.
type node struct {
	Name    string
	Addr    string // its InternalIP (else first address)
	Kubelet int32  // the kubelet's port, the target of egress to the node
}

func (n node) kubeletAddr() string {
	return net.JoinHostPort(n.Addr, strconv.Itoa(int(n.Kubelet)))
}

// pickNodes returns up to two schedulable, Ready, untainted nodes, by
// name: the client's node first.
func pickNodes(ctx context.Context, cs kubernetes.Interface) ([]node, error) {
	list, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, fmt.Errorf("list nodes: %w", err)
	}
	var out []node
	for _, n := range list.Items {
		if usable(&n) {
			out = append(out, node{Name: n.Name, Addr: nodeAddr(&n), Kubelet: n.Status.DaemonEndpoints.KubeletEndpoint.Port})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no schedulable Ready node without NoSchedule or NoExecute taints among %d nodes", len(list.Items))
	}
	slices.SortFunc(out, func(a, b node) int { return strings.Compare(a.Name, b.Name) })
	return out[:min(2, len(out))], nil
}

func usable(n *corev1.Node) bool {
	if n.Spec.Unschedulable || nodeAddr(n) == "" {
		return false
	}
	for _, t := range n.Spec.Taints {
		if t.Effect == corev1.TaintEffectNoSchedule || t.Effect == corev1.TaintEffectNoExecute {
			return false
		}
	}
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

func nodeAddr(n *corev1.Node) string {
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP {
			return a.Address
		}
	}
	for _, a := range n.Status.Addresses {
		if net.ParseIP(a.Address) != nil {
			return a.Address
		}
	}
	return ""
}

// detectNetwork says what runs the pod network as far as the API tells:
// podnet's DaemonSet (label app.kubernetes.io/name=podnet), and whether
// its agent enforces NetworkPolicy (--network-policy).
func detectNetwork(ctx context.Context, cs kubernetes.Interface) (string, Env) {
	list, err := cs.AppsV1().DaemonSets("").List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/name=podnet,app.kubernetes.io/component=node-agent"})
	if err != nil {
		why := "cannot list DaemonSets (" + err.Error() + "), so nothing says NetworkPolicy is enforced"
		return "unknown: " + why, Env{PolicyUnknown: why}
	}
	if len(list.Items) == 0 {
		why := "podnet does not run in this cluster, and nothing says its network enforces NetworkPolicy"
		return "not podnet (no DaemonSet labelled app.kubernetes.io/name=podnet)", Env{PolicyUnknown: why}
	}
	ds := &list.Items[0]
	name := fmt.Sprintf("%s/%s, %d of %d agents ready", ds.Namespace, ds.Name, ds.Status.NumberReady, ds.Status.DesiredNumberScheduled)
	if !argsHave(ds, "--network-policy") {
		why := "podnet's agents run without --network-policy (the etcd variant, or turned off)"
		return "podnet (DaemonSet " + name + ", NetworkPolicy not enforced)", Env{HostPorts: true, PolicyUnknown: why}
	}
	return "podnet (DaemonSet " + name + ", NetworkPolicy enforced)", Env{HostPorts: true, PolicyEnforced: true}
}

func argsHave(ds *appsv1.DaemonSet, flag string) bool {
	for _, c := range ds.Spec.Template.Spec.Containers {
		for _, a := range append(slices.Clone(c.Command), c.Args...) {
			if a == flag || strings.HasPrefix(a, flag+"=") && !strings.HasSuffix(a, "=false") {
				return true
			}
		}
	}
	return false
}

// hasDNS: the cluster's DNS Service exists under its conventional name.
func hasDNS(ctx context.Context, cs kubernetes.Interface) (bool, error) {
	_, err := cs.CoreV1().Services("kube-system").Get(ctx, "kube-dns", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}
