package k8s_test

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/test/k8s/cluster"
)

// The pods, Service and policies TestRollingUpgrade and
// TestRoutingModeChange keep under traffic, on two nodes:
//
//	node 1: upg-srv1 (isolated: ingress from access=a only; the egress
//	        target; hostPort), upg-srvo (open; an Admin
//	        ClusterNetworkPolicy denies ingress from cnp=denied),
//	        upg-cla1 (access=a), upg-clb1 (access=b)
//	node 2: upg-srv2 (isolated like srv1; behind Service upg-srv2),
//	        upg-cle2 (access=a; egress only to the egress target),
//	        upg-clc2 (cnp=denied)
//
// Each direction has an allow and a deny, every path (same node, across
// nodes, a ClusterIP, a hostPort, egress to the outside network) an
// allowed and a denied pair.

// upgHostPort is upg-srv1's host port on node 1.
const upgHostPort = 18081

// upgPod is one pod of the world: its node (index) and labels.
type upgPod struct {
	name   string
	node   int
	labels map[string]string
}

var upgPods = []upgPod{
	{"upg-srv1", 0, map[string]string{"upg-role": "isolated", "egress-target": "yes"}},
	{"upg-srvo", 0, map[string]string{"upg-open": "yes"}},
	{"upg-cla1", 0, map[string]string{"access": "a"}},
	{"upg-clb1", 0, map[string]string{"access": "b"}},
	{"upg-srv2", 1, map[string]string{"upg-role": "isolated", "svc": "upg-srv2"}},
	{"upg-cle2", 1, map[string]string{"access": "a", "egress": "restricted"}},
	{"upg-clc2", 1, map[string]string{"cnp": "denied"}},
}

// upgPair is a pair by pod names; to is a pod, or "svc" (the ClusterIP
// of upg-srv2), "hostport" (node 1's address at upgHostPort) or
// "outside" (a listener of the test's on the outside network).
type upgPair struct {
	from, to, path string
	allowed        bool
}

var upgPairs = []upgPair{
	{"upg-cla1", "upg-srv1", "same-node", true},
	{"upg-clb1", "upg-srv1", "same-node, ingress not allowed", false},
	{"upg-cla1", "upg-srvo", "same-node", true},
	{"upg-cle2", "upg-srv2", "same-node, egress not allowed", false},
	{"upg-cla1", "upg-srv2", "cross-node", true},
	{"upg-clb1", "upg-srv2", "cross-node, ingress not allowed", false},
	{"upg-cle2", "upg-srv1", "cross-node, egress allowed", true},
	{"upg-cle2", "upg-srvo", "cross-node, egress not allowed", false},
	{"upg-clc2", "upg-srvo", "cross-node, Admin Deny", false},
	{"upg-cla1", "svc", "clusterip", true},
	{"upg-clb1", "svc", "clusterip, ingress not allowed", false},
	{"upg-cla1", "hostport", "hostport", true},
	{"upg-clb1", "hostport", "hostport, ingress not allowed", false},
	{"upg-cla1", "outside", "egress to the outside, masqueraded", true},
	{"upg-cle2", "outside", "egress to the outside not allowed", false},
}

// upgWorld creates the policies first (so that every pod starts under
// them), then the pods and the Service, and returns the pairs with the
// clients' network namespaces open (closed when t ends), and the
// outside listener.
func upgWorld(ctx context.Context, t *testing.T, c *cluster.Cluster) ([]trafficPair, *outsideListener) {
	t.Helper()
	upgPolicies(ctx, t, c)
	out := listenOutside(t, c)
	pods := map[string]*corev1.Pod{}
	for _, u := range upgPods {
		p := onNode(c.Nodes[u.node], diagPod(u.name, "serve", "--listen", fmt.Sprintf(":%d", diagPort)))
		for k, v := range u.labels {
			p.Labels[k] = v
		}
		if u.name == "upg-srv1" {
			p.Spec.Containers[0].Ports = []corev1.ContainerPort{{
				Name: "http", ContainerPort: diagPort, HostPort: upgHostPort, Protocol: corev1.ProtocolTCP,
			}}
		}
		if _, err := c.Client.CoreV1().Pods("default").Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range upgPods {
		pods[u.name] = waitPod(ctx, t, c, u.name, corev1.PodRunning)
	}
	svc, err := c.Client.CoreV1().Services("default").Create(ctx, diagService("upg-srv2", corev1.ServiceTypeClusterIP, false), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	serviceProgrammed(ctx, t, c, svc, pods["upg-srv2"])
	nss := map[string]*netns.NetNS{}
	var pairs []trafficPair
	for _, up := range upgPairs {
		from := pods[up.from]
		ns := nss[up.from]
		if ns == nil {
			ns = openPodNetNS(ctx, t, c, from)
			nss[up.from] = ns
		}
		var dst netip.AddrPort
		switch up.to {
		case "svc":
			dst = netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
		case "hostport":
			dst = netip.AddrPortFrom(netip.MustParseAddr(c.Nodes[0].IP), upgHostPort)
		case "outside":
			dst = out.addr
		default:
			dst = netip.AddrPortFrom(netip.MustParseAddr(pods[up.to].Status.PodIP), diagPort)
		}
		pairs = append(pairs, trafficPair{name: up.from + " -> " + up.to, path: up.path, ns: ns, dst: dst, allowed: up.allowed})
	}
	return pairs, out
}

// outsideListener accepts connections on the outside network's address
// (the switch's namespace) and counts those whose source is not a
// node's address: a pod's egress there must be masqueraded.
type outsideListener struct {
	addr   netip.AddrPort
	nodes  map[netip.Addr]bool
	mu     sync.Mutex
	unmasq int
	first  string // the first unmasqueraded source
}

// listenOutside starts the listener; it stops when t ends.
func listenOutside(t *testing.T, c *cluster.Cluster) *outsideListener {
	t.Helper()
	var ln net.Listener
	err := netns.Do(netns.NamedPath(c.OutsideNetNS), func() error {
		var err error
		ln, err = net.Listen("tcp4", net.JoinHostPort(cluster.OutsideIP, "0"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o := &outsideListener{addr: netip.MustParseAddrPort(ln.Addr().String()), nodes: map[netip.Addr]bool{}}
	for _, n := range c.Nodes {
		o.nodes[netip.MustParseAddr(n.IP)] = true
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return // closed
			}
			src, _ := netip.ParseAddrPort(conn.RemoteAddr().String())
			conn.Close()
			if !o.nodes[src.Addr()] {
				o.mu.Lock()
				if o.unmasq++; o.first == "" {
					o.first = src.String()
				}
				o.mu.Unlock()
			}
		}
	}()
	return o
}

// unmasqueraded returns how many connections came from an address that
// is no node's, and the first such source.
func (o *outsideListener) unmasqueraded() (int, string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.unmasq, o.first
}

// serviceProgrammed waits until every node's kube-proxy has the
// Service's rules, with its endpoint backend (one commit, so a pod's
// traffic meets them all). A pod's probe sent before would leave a
// conntrack entry masqueraded towards the outside network for two
// minutes, and a later probe from the same source port would follow it
// instead of the Service's DNAT. (The node's own connect cannot tell:
// backend's policy drops it from the other node.)
func serviceProgrammed(ctx context.Context, t *testing.T, c *cluster.Cluster, svc *corev1.Service, backend *corev1.Pod) {
	t.Helper()
	for _, n := range c.Nodes {
		waitUntil(ctx, t, fmt.Sprintf("kube-proxy's rules for Service %s on %s", svc.Name, n.Name), time.Minute, func() error {
			rules := proxyRules(c, n.Name)
			if !strings.Contains(rules, svc.Spec.ClusterIP) || !strings.Contains(rules, backend.Status.PodIP) {
				return fmt.Errorf("no rules for %s to %s yet", svc.Spec.ClusterIP, backend.Status.PodIP)
			}
			return nil
		})
	}
}

// openPodNetNS opens p's network namespace on its node, closed when t
// ends.
func openPodNetNS(ctx context.Context, t *testing.T, c *cluster.Cluster, p *corev1.Pod) *netns.NetNS {
	t.Helper()
	for _, n := range c.Nodes {
		if n.Name != p.Spec.NodeName {
			continue
		}
		ns, err := podNetNS(ctx, n, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { ns.Close() })
		return ns
	}
	t.Fatalf("pod %s on %q: no such node", p.Name, p.Spec.NodeName)
	return nil
}

// upgPolicies creates the NetworkPolicies (an ingress allow that
// isolates the servers, an egress allow that isolates upg-cle2) and the
// Admin ClusterNetworkPolicy that denies upg-clc2 to upg-srvo.
func upgPolicies(ctx context.Context, t *testing.T, c *cluster.Cluster) {
	t.Helper()
	sel := func(k, v string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchLabels: map[string]string{k: v}}
	}
	nps := []*networkingv1.NetworkPolicy{
		{ObjectMeta: metav1.ObjectMeta{Name: "upg-servers-from-a"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *sel("upg-role", "isolated"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
			Ingress:     []networkingv1.NetworkPolicyIngressRule{{From: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("access", "a")}}}},
		}},
		{ObjectMeta: metav1.ObjectMeta{Name: "upg-egress-to-target"}, Spec: networkingv1.NetworkPolicySpec{
			PodSelector: *sel("egress", "restricted"),
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeEgress},
			Egress:      []networkingv1.NetworkPolicyEgressRule{{To: []networkingv1.NetworkPolicyPeer{{PodSelector: sel("egress-target", "yes")}}}},
		}},
	}
	for _, np := range nps {
		if _, err := c.Client.NetworkingV1().NetworkPolicies("default").Create(ctx, np, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	pods := func(k, v string) map[string]any {
		return map[string]any{"pods": map[string]any{
			"namespaceSelector": map[string]any{},
			"podSelector":       map[string]any{"matchLabels": map[string]any{k: v}},
		}}
	}
	err := createClusterPolicy(ctx, c, "upg-admin-deny", map[string]any{
		"tier":     "Admin",
		"priority": int64(10),
		"subject":  pods("upg-open", "yes"),
		"ingress": []any{map[string]any{"name": "deny-c", "action": "Deny",
			"from": []any{pods("cnp", "denied")}}},
	})
	if err != nil {
		t.Fatalf("ClusterNetworkPolicy upg-admin-deny: %v", err)
	}
}

// startUpgTraffic starts the probes and waits until every pair has had
// its verdict 10 probes in a row: the policies, the Service and the host
// port are in force. It returns the traffic and when the measured window
// starts.
func startUpgTraffic(ctx context.Context, t *testing.T, pairs []trafficPair) (*traffic, time.Time) {
	t.Helper()
	tr := startTraffic(pairs)
	t.Cleanup(tr.stop)
	waitUntil(ctx, t, "every pair allowed or denied as the policies say", 2*time.Minute, func() error { return tr.settled(10) })
	from := time.Now()
	tr.mark("measuring")
	return tr, from
}

// judgeTraffic stops the probes, logs the result's summary and the
// timeline, and returns the result; a connection to the outside that was
// not masqueraded fails t.
func judgeTraffic(t *testing.T, tr *traffic, out *outsideListener, from time.Time) trafficResult {
	t.Helper()
	to := time.Now()
	tr.stop()
	if n, first := out.unmasqueraded(); n > 0 {
		t.Errorf("%d connections to the outside network came from a pod's own address (first %s): not masqueraded", n, first)
	}
	r := tr.result(from, to)
	t.Logf("timeline:\n%s", tr.timeline(r, from))
	t.Logf("%s: %s", t.Name(), r.summary(len(tr.logs), to.Sub(from)))
	return r
}
