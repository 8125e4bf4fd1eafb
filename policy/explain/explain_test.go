package explain

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	cnpv1beta1 "sigs.k8s.io/network-policy-api/apis/v1beta1"
)

// A small cluster: namespace shop (pods web, db, and a hostNetwork pod
// agent) and namespace tools (pod debug); node n1 has the shop pods.
//
//	shop/db-ingress: app=db takes TCP "pg" from app=web, and UDP 53 from anything
//	shop/deny-all:   every shop pod isolated for ingress
//	shop/web-egress: app=web may reach app=db, and 203.0.113.0/24 except .7
func cluster() *Cluster {
	tcp, udp := corev1.ProtocolTCP, corev1.ProtocolUDP
	pod := func(ns, name, app string, ips ...string) corev1.Pod {
		p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": app}},
			Spec: corev1.PodSpec{NodeName: "n1"}, Status: corev1.PodStatus{Phase: corev1.PodRunning}}
		for _, ip := range ips {
			p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: ip})
		}
		return p
	}
	db := pod("shop", "db", "db", "10.244.0.2", "fd00::2")
	db.Spec.Containers = []corev1.Container{{Name: "pg", Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432}}}}
	agent := pod("shop", "agent", "agent", "192.168.0.1")
	agent.Spec.HostNetwork = true
	np := func(name string, app string, types ...networkingv1.PolicyType) networkingv1.NetworkPolicy {
		sel := metav1.LabelSelector{}
		if app != "" {
			sel.MatchLabels = map[string]string{"app": app}
		}
		return networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "shop", Name: name},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: sel, PolicyTypes: types}}
	}
	dbIn := np("db-ingress", "db")
	dbIn.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{
		{From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}},
			Ports: []networkingv1.NetworkPolicyPort{{Protocol: &tcp, Port: ptr(intstr.FromString("pg"))}}},
		{Ports: []networkingv1.NetworkPolicyPort{{Protocol: &udp, Port: ptr(intstr.FromInt32(53))}}},
	}
	webOut := np("web-egress", "web", networkingv1.PolicyTypeEgress)
	webOut.Spec.Egress = []networkingv1.NetworkPolicyEgressRule{
		{To: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}}},
		{To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "203.0.113.0/24", Except: []string{"203.0.113.7/32"}}}}},
	}
	return &Cluster{
		Pods: []corev1.Pod{pod("shop", "web", "web", "10.244.0.1", "fd00::1"), db, agent, pod("tools", "debug", "debug", "10.244.1.5"),
			pod("tools", "pending", "debug")},
		Namespaces: []corev1.Namespace{{ObjectMeta: metav1.ObjectMeta{Name: "shop"}}, {ObjectMeta: metav1.ObjectMeta{Name: "tools"}}},
		Policies:   []networkingv1.NetworkPolicy{dbIn, np("deny-all", ""), webOut},
		Nodes: []corev1.Node{{ObjectMeta: metav1.ObjectMeta{Name: "n1"},
			Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "192.168.0.1"}}}}},
	}
}

func ptr[T any](v T) *T { return &v }

func TestBuild(t *testing.T) {
	tests := []struct {
		name             string
		q                Query
		allowed          bool
		egress, ingress  string // the sides' reasons
		port             uint16
		src, dst         Endpoint
		allowing         []string // policy/direction/index of the rules that allow
		textHas, textNot []string
	}{{
		name: "named port resolved by the destination", q: Query{Source: "shop/web", Destination: "shop/db", Port: "pg"},
		allowed: true, egress: "AllowedByRule", ingress: "AllowedByRule", port: 5432,
		src:      Endpoint{Pod: "shop/web", IP: "10.244.0.1", Node: "n1", Kind: "pod"},
		dst:      Endpoint{Pod: "shop/db", IP: "10.244.0.2", Node: "n1", Kind: "pod"},
		allowing: []string{"shop/web-egress egress 0", "shop/db-ingress ingress 0"},
		textHas: []string{
			"shop/web (10.244.0.1) -> shop/db (10.244.0.2) TCP/5432 (pg): ALLOWED",
			`shop/db-ingress ingress rule 0 allows: from[0] matches: pods app=web of namespace shop; ports[0] matches: TCP "pg" (5432 on shop/db)`,
			"shop/deny-all has no ingress rules: it only isolates",
		},
	}, {
		name: "named port of a destination given by its address", q: Query{Source: "shop/web", Destination: "fd00::2", Port: "pg"},
		allowed: true, egress: "AllowedByRule", ingress: "AllowedByRule", port: 5432,
		src:      Endpoint{Pod: "shop/web", IP: "fd00::1", Node: "n1", Kind: "pod"},
		dst:      Endpoint{Pod: "shop/db", IP: "fd00::2", Node: "n1", Kind: "pod"},
		allowing: []string{"shop/web-egress egress 0", "shop/db-ingress ingress 0"},
	}, {
		name: "denied from another namespace; the address of a pod is the pod", q: Query{Source: "10.244.1.5", Destination: "shop/db", Port: "5432"},
		egress: "NotIsolated", ingress: "Denied", port: 5432,
		src: Endpoint{Pod: "tools/debug", IP: "10.244.1.5", Node: "n1", Kind: "pod"},
		dst: Endpoint{Pod: "shop/db", IP: "10.244.0.2", Node: "n1", Kind: "pod"},
		textHas: []string{
			"egress of tools/debug: allowed: not isolated, no NetworkPolicy or ClusterNetworkPolicy selects it for egress",
			"ingress of shop/db: DENIED: isolated by shop/db-ingress, shop/deny-all, and no rule allows",
			`shop/db-ingress ingress rule 0 does not allow: no peer matches (from: pods app=web of namespace shop); ports[0] matches`,
			"shop/db-ingress ingress rule 1 does not allow: every peer (no from); no port matches TCP/5432 (ports: UDP 53)",
		},
	}, {
		name: "external address by ipBlock, IPv4 picked", q: Query{Source: "shop/web", Destination: "203.0.113.9", Port: "443"},
		allowed: true, egress: "AllowedByRule", ingress: "NotIsolated", port: 443,
		src:      Endpoint{Pod: "shop/web", IP: "10.244.0.1", Node: "n1", Kind: "pod"},
		dst:      Endpoint{IP: "203.0.113.9", Kind: "external"},
		allowing: []string{"shop/web-egress egress 1"},
		textHas:  []string{"to[0] matches: ipBlock 203.0.113.0/24 except 203.0.113.7/32", "ingress: allowed: 203.0.113.9 is no pod"},
	}, {
		name: "the except", q: Query{Source: "shop/web", Destination: "203.0.113.7", Port: "443"},
		egress: "Denied", ingress: "NotIsolated", port: 443,
		src: Endpoint{Pod: "shop/web", IP: "10.244.0.1", Node: "n1", Kind: "pod"},
		dst: Endpoint{IP: "203.0.113.7", Kind: "external"},
	}, {
		name: "IPv6 when the source is", q: Query{Source: "fd00::9", Destination: "shop/db", Port: "53", Protocol: "udp"},
		allowed: true, egress: "NotIsolated", ingress: "AllowedByRule", port: 53,
		src:      Endpoint{IP: "fd00::9", Kind: "external"},
		dst:      Endpoint{Pod: "shop/db", IP: "fd00::2", Node: "n1", Kind: "pod"},
		allowing: []string{"shop/db-ingress ingress 1"},
	}, {
		name: "from its node: a hostNetwork pod is its node", q: Query{Source: "shop/agent", Destination: "shop/web", Port: "80"},
		allowed: true, egress: "NotIsolated", ingress: "LocalNode", port: 80,
		src:     Endpoint{IP: "192.168.0.1", Node: "n1", Kind: "node"},
		dst:     Endpoint{Pod: "shop/web", IP: "10.244.0.1", Node: "n1", Kind: "pod"},
		textHas: []string{"192.168.0.1 (node n1) -> ", "always allowed in", "note: shop/agent is a hostNetwork pod"},
	}, {
		name: "to itself", q: Query{Source: "shop/db", Destination: "shop/db", Port: "1"},
		allowed: true, egress: "NotIsolated", ingress: "Self", port: 1,
		src: Endpoint{Pod: "shop/db", IP: "10.244.0.2", Node: "n1", Kind: "pod"},
		dst: Endpoint{Pod: "shop/db", IP: "10.244.0.2", Node: "n1", Kind: "pod"},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Build(cluster(), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed != tt.allowed || r.Egress.Reason != tt.egress || r.Ingress.Reason != tt.ingress || r.Port != tt.port {
				t.Errorf("allowed %v egress %s ingress %s port %d, want %v %s %s %d", r.Allowed, r.Egress.Reason, r.Ingress.Reason, r.Port,
					tt.allowed, tt.egress, tt.ingress, tt.port)
			}
			if r.Source != tt.src || r.Destination != tt.dst {
				t.Errorf("ends %+v -> %+v, want %+v -> %+v", r.Source, r.Destination, tt.src, tt.dst)
			}
			var allowing []string
			for _, s := range []Side{r.Egress, r.Ingress} {
				for _, rule := range s.Rules {
					if rule.Allows {
						allowing = append(allowing, rule.Policy+" "+rule.Direction+" "+string(rune('0'+rule.Index)))
					}
				}
			}
			if !reflect.DeepEqual(allowing, tt.allowing) {
				t.Errorf("allowing rules %q, want %q", allowing, tt.allowing)
			}
			var b bytes.Buffer
			if err := r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.textHas {
				if !strings.Contains(b.String(), s) {
					t.Errorf("text lacks %q:\n%s", s, b.String())
				}
			}
			js, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(&back, r) {
				t.Errorf("JSON round trip: %v\n%s", err, js)
			}
		})
	}
}

// TestText pins the whole text of one report.
func TestText(t *testing.T) {
	r, err := Build(cluster(), Query{Source: "tools/debug", Destination: "shop/db", Port: "pg"})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	want := `tools/debug (10.244.1.5) -> shop/db (10.244.0.2) TCP/5432 (pg): DENIED
  egress of tools/debug: allowed: not isolated, no NetworkPolicy or ClusterNetworkPolicy selects it for egress
  ingress of shop/db: DENIED: isolated by shop/db-ingress, shop/deny-all, and no rule allows
    shop/db-ingress ingress rule 0 does not allow: no peer matches (from: pods app=web of namespace shop); ports[0] matches: TCP "pg" (5432 on shop/db)
    shop/db-ingress ingress rule 1 does not allow: every peer (no from); no port matches TCP/5432 (ports: UDP 53)
    shop/deny-all has no ingress rules: it only isolates
`
	if b.String() != want {
		t.Errorf("got\n%s\nwant\n%s", b.String(), want)
	}
}

func TestBuildErrors(t *testing.T) {
	tests := []struct {
		q    Query
		want string
	}{
		{Query{Source: "shop/nope", Destination: "shop/db", Port: "1"}, "source: no pod shop/nope"},
		{Query{Source: "shop", Destination: "shop/db", Port: "1"}, `source "shop": want namespace/pod or an IP address`},
		{Query{Source: "tools/pending", Destination: "shop/db", Port: "1"}, "pod tools/pending has no address yet"},
		{Query{Source: "shop/web", Destination: "203.0.113.1", Port: "http"}, "a named port needs a destination pod"},
		{Query{Source: "shop/web", Destination: "shop/db", Port: "pg", Protocol: "UDP"}, "has no UDP port of that name"},
		{Query{Source: "shop/web", Destination: "shop/db", Port: "mysql"}, "it has pg (TCP/5432)"},
		{Query{Source: "shop/web", Destination: "shop/db", Port: "0"}, "port 0"},
		{Query{Source: "shop/web", Destination: "shop/db"}, "a port is needed"},
		{Query{Source: "shop/web", Destination: "shop/db", Port: "1", Protocol: "ICMP"}, `protocol "ICMP"`},
		{Query{Source: "tools/debug", Destination: "fd00::1", Port: "1"}, "no address family in common"},
	}
	for _, tt := range tests {
		_, err := Build(cluster(), tt.q)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: error %v, want %q", tt.q, err, tt.want)
		}
	}
}

// clusterWithCNPs is cluster() with ClusterNetworkPolicies, the tools
// namespace labelled team=tools:
//
//	Admin pass-web (5):     app=db takes TCP 5432 from app=web: Pass (to NetworkPolicy)
//	Admin deny-tools (10):  app=db takes nothing from team=tools: Deny
//	Baseline no-docs (10):  tools pods reach nothing of 203.0.113.0/24: Deny
func clusterWithCNPs() *Cluster {
	c := cluster()
	c.Namespaces[1].Labels = map[string]string{"team": "tools"}
	db := &cnpv1beta1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}}
	c.ClusterPolicies = []cnpv1beta1.ClusterNetworkPolicy{{
		ObjectMeta: metav1.ObjectMeta{Name: "pass-web"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: cnpv1beta1.AdminTier, Priority: 5, Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: db},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Name: "web", Action: cnpv1beta1.ClusterNetworkPolicyRuleActionPass,
				From:      []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Pods: &cnpv1beta1.NamespacedPod{PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"app": "web"}}}}},
				Protocols: []cnpv1beta1.ClusterNetworkPolicyProtocol{{TCP: &cnpv1beta1.ClusterNetworkPolicyProtocolTCP{DestinationPort: &cnpv1beta1.Port{Number: 5432}}}}}}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "deny-tools"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: cnpv1beta1.AdminTier, Priority: 10, Subject: cnpv1beta1.ClusterNetworkPolicySubject{Pods: db},
			Ingress: []cnpv1beta1.ClusterNetworkPolicyIngressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				From: []cnpv1beta1.ClusterNetworkPolicyIngressPeer{{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "tools"}}}}}}},
	}, {
		ObjectMeta: metav1.ObjectMeta{Name: "no-docs"},
		Spec: cnpv1beta1.ClusterNetworkPolicySpec{Tier: cnpv1beta1.BaselineTier, Priority: 10,
			Subject: cnpv1beta1.ClusterNetworkPolicySubject{Namespaces: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "tools"}}},
			Egress: []cnpv1beta1.ClusterNetworkPolicyEgressRule{{Action: cnpv1beta1.ClusterNetworkPolicyRuleActionDeny,
				To: []cnpv1beta1.ClusterNetworkPolicyEgressPeer{{Networks: []cnpv1beta1.CIDR{"203.0.113.0/24"}}}}}},
	}}
	return c
}

func TestBuildClusterPolicies(t *testing.T) {
	tests := []struct {
		name            string
		q               Query
		allowed         bool
		egress, ingress string
		admin, baseline string // the sides' deciding rules: policy and action, of the side named by the test
		textHas         []string
	}{{
		name: "an Admin Pass hands over to NetworkPolicy", q: Query{Source: "shop/web", Destination: "shop/db", Port: "pg"},
		allowed: true, egress: "AllowedByRule", ingress: "AllowedByRule", admin: "pass-web Pass",
		textHas: []string{
			"ingress of shop/db: Admin pass-web (priority 5) rule 0 \"web\" Pass passes to NetworkPolicy; allowed by shop/db-ingress ingress rule 0",
			"Admin pass-web (priority 5) rule 0 \"web\" Pass ingress matches: from[0] matches: pods app=web of namespaces (all); protocols[0] matches: TCP/5432",
			"Admin deny-tools (priority 10) rule 0 Deny ingress does not match: no peer matches (from: every pod of namespaces team=tools)",
		},
	}, {
		name: "an Admin Deny overrides NetworkPolicy", q: Query{Source: "tools/debug", Destination: "shop/db", Port: "53", Protocol: "UDP"},
		egress: "NotIsolated", ingress: "DeniedByAdmin", admin: "deny-tools Deny",
		textHas: []string{
			"ingress of shop/db: DENIED by Admin deny-tools (priority 10) rule 0 Deny, whatever NetworkPolicy says",
			"egress of tools/debug: allowed: no NetworkPolicy isolates it for egress, and no rule of the ClusterNetworkPolicies that select it matches",
		},
	}, {
		name: "a Baseline Deny where no NetworkPolicy isolates", q: Query{Source: "tools/debug", Destination: "203.0.113.9", Port: "443"},
		egress: "DeniedByBaseline", ingress: "NotIsolated", baseline: "no-docs Deny",
		textHas: []string{
			"egress of tools/debug: DENIED by Baseline no-docs (priority 10) rule 0 Deny (no NetworkPolicy isolates it)",
			"to[0] matches: networks 203.0.113.0/24; every protocol and port (no protocols)",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := Build(clusterWithCNPs(), tt.q)
			if err != nil {
				t.Fatal(err)
			}
			if r.Allowed != tt.allowed || r.Egress.Reason != tt.egress || r.Ingress.Reason != tt.ingress {
				t.Errorf("allowed %v egress %s ingress %s, want %v %s %s", r.Allowed, r.Egress.Reason, r.Ingress.Reason, tt.allowed, tt.egress, tt.ingress)
			}
			ref := func(r *ClusterRuleRef) string {
				if r == nil {
					return ""
				}
				return r.Policy + " " + r.Action
			}
			if a := ref(r.Ingress.Admin) + ref(r.Egress.Admin); a != tt.admin {
				t.Errorf("Admin rule %q, want %q", a, tt.admin)
			}
			if b := ref(r.Ingress.Baseline) + ref(r.Egress.Baseline); b != tt.baseline {
				t.Errorf("Baseline rule %q, want %q", b, tt.baseline)
			}
			var b bytes.Buffer
			if err := r.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			for _, s := range tt.textHas {
				if !strings.Contains(b.String(), s) {
					t.Errorf("text lacks %q:\n%s", s, b.String())
				}
			}
			js, err := json.Marshal(r)
			if err != nil {
				t.Fatal(err)
			}
			var back Report
			if err := json.Unmarshal(js, &back); err != nil || !reflect.DeepEqual(&back, r) {
				t.Errorf("JSON round trip: %v\n%s", err, js)
			}
		})
	}
	c := cluster()
	c.ClusterPoliciesUnread = "the API server does not serve them"
	r, err := Build(c, Query{Source: "shop/web", Destination: "shop/db", Port: "pg"})
	if err != nil || !slices.ContainsFunc(r.Notes, func(n string) bool { return strings.Contains(n, "ClusterNetworkPolicies were not read") }) {
		t.Errorf("notes %q (%v), want one on the unread ClusterNetworkPolicies", r.Notes, err)
	}
}
