package explain

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"

	"github.com/podnet/podnet/policy"
)

// Cluster is what the question is answered from: the API objects as
// listed. Nodes may be missing (a user not allowed to list them): then
// traffic from a node is judged as from any other address.
type Cluster struct {
	Pods       []corev1.Pod
	Namespaces []corev1.Namespace
	Policies   []networkingv1.NetworkPolicy
	Nodes      []corev1.Node
	// ClusterPolicies are the ClusterNetworkPolicies; when they could
	// not be read (their CRD is not installed, the user may not list
	// them) ClusterPoliciesUnread says why, and the report notes it.
	ClusterPolicies       []cnpv1beta1.ClusterNetworkPolicy
	ClusterPoliciesUnread string
}

// Query is the question as the user put it.
type Query struct {
	// Source and Destination are "namespace/pod" or an IP address.
	Source, Destination string
	// Port is a number, or the name of one of the destination pod's
	// container ports.
	Port string
	// Protocol is TCP (the default when empty), UDP or SCTP.
	Protocol string
}

// Report is the answer. Its JSON form is `podnet policy explain -o json`.
type Report struct {
	Source      Endpoint `json:"source"`
	Destination Endpoint `json:"destination"`
	Protocol    string   `json:"protocol"`
	Port        uint16   `json:"port"`
	// PortName is the named port the query gave, resolved to Port by the
	// destination pod's container ports.
	PortName string `json:"portName,omitempty"`
	Allowed  bool   `json:"allowed"`
	// Egress is the source pod's side, Ingress the destination pod's:
	// both must allow.
	Egress  Side `json:"egress"`
	Ingress Side `json:"ingress"`
	// Notes are caveats about the answer.
	Notes []string `json:"notes,omitempty"`
}

// Endpoint is one end of the connection.
type Endpoint struct {
	// Pod is namespace/name when the end is a pod policy applies to.
	Pod string `json:"pod,omitempty"`
	IP  string `json:"ip"`
	// Node is the pod's node, or the node that has the address.
	Node string `json:"node,omitempty"`
	// Kind is "pod", "node" (an address of a Node) or "external".
	Kind string `json:"kind"`
}

func (e Endpoint) String() string {
	switch e.Kind {
	case kindPod:
		return e.Pod + " (" + e.IP + ")"
	case kindNode:
		return e.IP + " (node " + e.Node + ")"
	}
	return e.IP
}

const (
	kindPod      = "pod"
	kindNode     = "node"
	kindExternal = "external"
)

// Side is one direction's verdict: the source's egress or the
// destination's ingress.
type Side struct {
	// Pod is the pod whose side this is; empty when that end is no pod
	// (nothing to isolate).
	Pod     string `json:"pod,omitempty"`
	Allowed bool   `json:"allowed"`
	// Reason is one of NotIsolated, Self, LocalNode, AllowedByRule,
	// Denied (NetworkPolicy's), AcceptedByAdmin, DeniedByAdmin,
	// AcceptedByBaseline, DeniedByBaseline (ClusterNetworkPolicy's).
	Reason string `json:"reason"`
	// Admin is the first Admin tier ClusterNetworkPolicy rule that
	// matched: it decided (Accept, Deny) or passed to NetworkPolicy
	// (Pass). Baseline is the same for the Baseline tier, read when no
	// Admin rule decided and no NetworkPolicy isolates the pod.
	Admin    *ClusterRuleRef `json:"admin,omitempty"`
	Baseline *ClusterRuleRef `json:"baseline,omitempty"`
	// IsolatedBy names the policies that select the pod for this
	// direction.
	IsolatedBy []string `json:"isolatedBy,omitempty"`
	// Rules are every rule of those policies, with what matched.
	Rules []Rule `json:"rules,omitempty"`
	// ClusterRules are the rules of the ClusterNetworkPolicies that
	// select the pod for this direction, in the order they are read:
	// the Admin tier, then the Baseline tier, each by priority, name
	// and rule index.
	ClusterRules []ClusterRule `json:"clusterRules,omitempty"`
}

// ClusterRuleRef names a ClusterNetworkPolicy rule.
type ClusterRuleRef struct {
	Policy   string `json:"policy"`
	Tier     string `json:"tier"` // Admin or Baseline
	Priority int32  `json:"priority"`
	// Index is in spec.ingress or spec.egress; Name is the rule's own,
	// when it has one.
	Index int    `json:"index"`
	Name  string `json:"name,omitempty"`
	// Action is Accept, Deny or Pass: what the rule does (a broken Deny
	// or Pass rule denies).
	Action string `json:"action"`
}

func (r ClusterRuleRef) String() string {
	s := fmt.Sprintf("%s %s (priority %d) rule %d", r.Tier, r.Policy, r.Priority, r.Index)
	if r.Name != "" {
		s += fmt.Sprintf(" %q", r.Name)
	}
	return s + " " + r.Action
}

// ClusterRule is one ClusterNetworkPolicy rule and what of it matched.
type ClusterRule struct {
	ClusterRuleRef
	// Matches: a peer and a protocol entry both match, so the rule's
	// action applies (if no rule before it matched).
	Matches bool `json:"matches"`
	// Peer is the index in from/to of the peer that matched, -2 when
	// none did (-1: a broken rule, which matches every peer); Port the
	// index in protocols, -1 when it lists none, -2 when none matched.
	Peer     int    `json:"peer"`
	PeerText string `json:"peerText"`
	Port     int    `json:"port"`
	PortText string `json:"portText"`
	// Broken says why the rule fails closed, when it does.
	Broken string `json:"broken,omitempty"`
}

// Rule is one rule of a policy and what of it matched.
type Rule struct {
	Policy string `json:"policy"`
	// Direction is "ingress" or "egress": Index is in spec.ingress or
	// spec.egress.
	Direction string `json:"direction"`
	Index     int    `json:"index"`
	Allows    bool   `json:"allows"`
	// Peer is the index in from/to of the peer that matched; -1 when the
	// rule lists none (every peer), -2 when none matched. PeerText says
	// it in words.
	Peer     int    `json:"peer"`
	PeerText string `json:"peerText"`
	// Port and PortText: the same for ports.
	Port     int    `json:"port"`
	PortText string `json:"portText"`
}

var reasonNames = map[policy.Reason]string{
	policy.NotIsolated:        "NotIsolated",
	policy.Self:               "Self",
	policy.LocalNode:          "LocalNode",
	policy.AllowedByRule:      "AllowedByRule",
	policy.Denied:             "Denied",
	policy.AcceptedByAdmin:    "AcceptedByAdmin",
	policy.DeniedByAdmin:      "DeniedByAdmin",
	policy.AcceptedByBaseline: "AcceptedByBaseline",
	policy.DeniedByBaseline:   "DeniedByBaseline",
}

// Build answers q from c.
func Build(c *Cluster, q Query) (*Report, error) {
	proto, err := parseProtocol(q.Protocol)
	if err != nil {
		return nil, err
	}
	snap := snapshot(c)
	srcIPs, srcPod, err := resolve(c, snap, q.Source, "source")
	if err != nil {
		return nil, err
	}
	dstIPs, dstPod, err := resolve(c, snap, q.Destination, "destination")
	if err != nil {
		return nil, err
	}
	srcIP, dstIP, err := pickFamily(srcIPs, dstIPs, q)
	if err != nil {
		return nil, err
	}
	src, dst := snap.EndpointFor(srcIP), snap.EndpointFor(dstIP)
	if dstPod == nil && dst.Pod != (policy.PodKey{}) {
		dstPod = apiPod(c, dst.Pod) // the destination by its address
	}
	rep := &Report{Protocol: proto.String()}
	rep.Port, rep.PortName, err = resolvePort(q.Port, proto, dstPod, q.Destination)
	if err != nil {
		return nil, err
	}
	if srcPod != nil && srcPod.Spec.HostNetwork {
		rep.Notes = append(rep.Notes, hostNetworkNote(q.Source))
	}
	if dstPod != nil && dstPod.Spec.HostNetwork {
		rep.Notes = append(rep.Notes, hostNetworkNote(q.Destination))
	}
	if len(c.Nodes) == 0 {
		rep.Notes = append(rep.Notes, "no Nodes were read: traffic from a pod's own node, always allowed in, is judged as from any other address, and no nodes peer matches")
	}
	if c.ClusterPoliciesUnread != "" {
		rep.Notes = append(rep.Notes, "ClusterNetworkPolicies were not read ("+c.ClusterPoliciesUnread+"): judged by NetworkPolicy alone")
	}
	e := policy.Explain(snap, src, dst, proto, rep.Port)
	rep.Source, rep.Destination = endpoint(snap, src), endpoint(snap, dst)
	rep.Allowed = e.Allowed
	policies := policyIndex(c)
	dp := findPod(snap, dst.Pod)
	rep.Egress = side(e.Egress, e.EgressRules, src, networkingv1.PolicyTypeEgress, policies, proto, rep.Port, dp)
	rep.Ingress = side(e.Ingress, e.IngressRules, dst, networkingv1.PolicyTypeIngress, policies, proto, rep.Port, dp)
	cps := clusterPolicyIndex(snap)
	rep.Egress.addCluster(e.Egress, e.EgressClusterRules, false, cps, proto, rep.Port, dp)
	rep.Ingress.addCluster(e.Ingress, e.IngressClusterRules, true, cps, proto, rep.Port, dp)
	return rep, nil
}

func hostNetworkNote(name string) string {
	return name + " is a hostNetwork pod: policy does not apply to it, and its traffic is its node's"
}

func snapshot(c *Cluster) *policy.Snapshot {
	s := &policy.Snapshot{}
	for i := range c.Policies {
		s.Policies = append(s.Policies, &c.Policies[i])
	}
	for i := range c.Namespaces {
		s.Namespaces = append(s.Namespaces, policy.NamespaceFromAPI(&c.Namespaces[i]))
	}
	for i := range c.Pods {
		s.Pods = append(s.Pods, policy.PodFromAPI(&c.Pods[i]))
	}
	for i := range c.Nodes {
		s.Nodes = append(s.Nodes, policy.NodeFromAPI(&c.Nodes[i]))
	}
	for i := range c.ClusterPolicies {
		s.ClusterPolicies = append(s.ClusterPolicies, policy.ClusterPolicyFromAPI(&c.ClusterPolicies[i]))
	}
	return s
}

func parseProtocol(s string) (policy.Protocol, error) {
	switch strings.ToUpper(s) {
	case "", "TCP":
		return policy.TCP, nil
	case "UDP":
		return policy.UDP, nil
	case "SCTP":
		return policy.SCTP, nil
	}
	return 0, fmt.Errorf("protocol %q: want TCP, UDP or SCTP", s)
}

// resolve turns one end as the user wrote it into its candidate
// addresses, and the API pod when it names one. A hostNetwork pod's
// address is its node's.
func resolve(c *Cluster, snap *policy.Snapshot, s, what string) ([]netip.Addr, *corev1.Pod, error) {
	if ip, err := netip.ParseAddr(s); err == nil {
		return []netip.Addr{ip.Unmap().WithZone("")}, nil, nil
	}
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return nil, nil, fmt.Errorf("%s %q: want namespace/pod or an IP address", what, s)
	}
	pod := apiPod(c, policy.PodKey{Namespace: ns, Name: name})
	if pod == nil {
		return nil, nil, fmt.Errorf("%s: no pod %s (or it has finished)", what, s)
	}
	var ips []netip.Addr
	if pod.Spec.HostNetwork {
		for _, a := range pod.Status.PodIPs {
			if ip, err := netip.ParseAddr(a.IP); err == nil {
				ips = append(ips, ip.Unmap())
			}
		}
	} else {
		for _, p := range snap.Pods {
			if p.Namespace == ns && p.Name == name {
				ips = p.IPs
			}
		}
	}
	if len(ips) == 0 {
		return nil, nil, fmt.Errorf("%s: pod %s has no address yet", what, s)
	}
	return ips, pod, nil
}

func apiPod(c *Cluster, k policy.PodKey) *corev1.Pod {
	for i := range c.Pods {
		if c.Pods[i].Namespace == k.Namespace && c.Pods[i].Name == k.Name {
			return &c.Pods[i]
		}
	}
	return nil
}

// pickFamily picks one address of each end, of one family: IPv4 when
// both ends have one, else IPv6.
func pickFamily(src, dst []netip.Addr, q Query) (netip.Addr, netip.Addr, error) {
	for _, v4 := range []bool{true, false} {
		i := slices.IndexFunc(src, func(a netip.Addr) bool { return a.Is4() == v4 })
		j := slices.IndexFunc(dst, func(a netip.Addr) bool { return a.Is4() == v4 })
		if i >= 0 && j >= 0 {
			return src[i], dst[j], nil
		}
	}
	return netip.Addr{}, netip.Addr{}, fmt.Errorf("%s (%v) and %s (%v) have no address family in common", q.Source, src, q.Destination, dst)
}

// resolvePort reads a port number, or resolves a name by the destination
// pod's container ports.
func resolvePort(s string, proto policy.Protocol, dst *corev1.Pod, dstName string) (uint16, string, error) {
	if s == "" {
		return 0, "", errors.New("a port is needed (--port)")
	}
	if n, err := strconv.ParseUint(s, 10, 16); err == nil {
		if n == 0 {
			return 0, "", errors.New("port 0: want 1-65535")
		}
		return uint16(n), "", nil
	}
	if dst == nil || dst.Spec.HostNetwork {
		return 0, "", fmt.Errorf("port %q: a named port needs a destination pod (%s is none)", s, dstName)
	}
	p := policy.PodFromAPI(dst)
	var names []string
	for _, np := range p.Ports {
		if np.Name == s && np.Protocol == proto {
			return np.Port, s, nil
		}
		names = append(names, fmt.Sprintf("%s (%s/%d)", np.Name, np.Protocol, np.Port))
	}
	if len(names) == 0 {
		return 0, "", fmt.Errorf("port %q: pod %s has no named %s port", s, dstName, proto)
	}
	return 0, "", fmt.Errorf("port %q: pod %s has no %s port of that name; it has %s", s, dstName, proto, strings.Join(names, ", "))
}

func endpoint(snap *policy.Snapshot, e policy.Endpoint) Endpoint {
	out := Endpoint{IP: e.IP.String(), Kind: kindExternal}
	if p := findPod(snap, e.Pod); p != nil {
		out.Pod, out.Node, out.Kind = e.Pod.String(), p.Node, kindPod
		return out
	}
	for _, n := range snap.Nodes {
		if slices.Contains(n.IPs, e.IP) {
			out.Node, out.Kind = n.Name, kindNode
		}
	}
	return out
}

func findPod(snap *policy.Snapshot, k policy.PodKey) *policy.Pod {
	if k == (policy.PodKey{}) {
		return nil
	}
	for i := range snap.Pods {
		if snap.Pods[i].Key() == k && !snap.Pods[i].HostNetwork {
			return &snap.Pods[i]
		}
	}
	return nil
}

func policyIndex(c *Cluster) map[string]*networkingv1.NetworkPolicy {
	m := make(map[string]*networkingv1.NetworkPolicy, len(c.Policies))
	for i := range c.Policies {
		p := &c.Policies[i]
		m[p.Namespace+"/"+p.Name] = p
	}
	return m
}

func side(v policy.Verdict, rules []policy.RuleMatch, e policy.Endpoint, dir networkingv1.PolicyType, policies map[string]*networkingv1.NetworkPolicy, proto policy.Protocol, port uint16, dstPod *policy.Pod) Side {
	s := Side{Allowed: v.Allowed(), Reason: reasonNames[v.Reason], IsolatedBy: v.IsolatedBy}
	if e.Pod != (policy.PodKey{}) {
		s.Pod = e.Pod.String()
	}
	for _, m := range rules {
		r := Rule{Policy: m.Rule.Policy, Direction: strings.ToLower(string(dir)), Index: m.Rule.Index, Allows: m.Allows(), Peer: m.Peer, Port: m.Port}
		np := policies[m.Rule.Policy]
		var peers []networkingv1.NetworkPolicyPeer
		var ports []networkingv1.NetworkPolicyPort
		if np != nil && dir == networkingv1.PolicyTypeIngress && m.Rule.Index < len(np.Spec.Ingress) {
			peers, ports = np.Spec.Ingress[m.Rule.Index].From, np.Spec.Ingress[m.Rule.Index].Ports
		} else if np != nil && dir == networkingv1.PolicyTypeEgress && m.Rule.Index < len(np.Spec.Egress) {
			peers, ports = np.Spec.Egress[m.Rule.Index].To, np.Spec.Egress[m.Rule.Index].Ports
		}
		ns := ""
		if np != nil {
			ns = np.Namespace
		}
		r.PeerText = peerText(m.Peer, peers, ns, dir)
		r.PortText = portText(m.Port, ports, proto, port, dstPod)
		s.Rules = append(s.Rules, r)
	}
	return s
}

func clusterPolicyIndex(snap *policy.Snapshot) map[string]*policy.ClusterPolicy {
	m := make(map[string]*policy.ClusterPolicy, len(snap.ClusterPolicies))
	for i := range snap.ClusterPolicies {
		m[snap.ClusterPolicies[i].Name] = &snap.ClusterPolicies[i]
	}
	return m
}

func clusterRef(r *policy.ClusterRuleRef) *ClusterRuleRef {
	if r == nil {
		return nil
	}
	return &ClusterRuleRef{Policy: r.Policy, Tier: r.Tier.String(), Priority: r.Priority, Index: r.Index, Name: r.Name, Action: r.Action.String()}
}

// addCluster adds the ClusterNetworkPolicy rules the side read.
func (s *Side) addCluster(v policy.Verdict, rules []policy.ClusterRuleMatch, ingress bool, cps map[string]*policy.ClusterPolicy,
	proto policy.Protocol, port uint16, dstPod *policy.Pod) {
	s.Admin, s.Baseline = clusterRef(v.Admin), clusterRef(v.Baseline)
	for _, m := range rules {
		r := ClusterRule{ClusterRuleRef: *clusterRef(&m.Rule), Matches: m.Matches(), Peer: m.Peer, Port: m.Port, Broken: m.Broken}
		var rule *policy.ClusterRule
		if p := cps[m.Rule.Policy]; p != nil {
			if rs := p.Ingress; ingress && m.Rule.Index < len(rs) {
				rule = &rs[m.Rule.Index]
			} else if rs := p.Egress; !ingress && m.Rule.Index < len(rs) {
				rule = &rs[m.Rule.Index]
			}
		}
		if m.Broken != "" || rule == nil {
			r.PeerText = "broken: " + m.Broken
			if m.Rule.Action == policy.Accept {
				r.PortText = "fails closed: matches nothing"
			} else {
				r.PortText = "fails closed: matches everything"
			}
		} else {
			r.PeerText = clusterPeerText(m.Peer, rule.Peers, ingress)
			r.PortText = clusterPortText(m.Port, rule.Protocols, proto, port, dstPod)
		}
		s.ClusterRules = append(s.ClusterRules, r)
	}
}
