package policy

import (
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
)

func findPod(ir *IR, ns, name string) *PodRules {
	for i := range ir.Pods {
		if ir.Pods[i].Pod == (PodKey{ns, name}) {
			return &ir.Pods[i]
		}
	}
	return nil
}

// TestCompileSharesSets: one set per distinct selector pair, whichever
// policy and namespace it is written in; a podSelector alone is scoped to
// the policy's namespace, so the same podSelector in two namespaces is two
// sets.
func TestCompileSharesSets(t *testing.T) {
	s := fixture(
		withIngress(np("x", "p1", sel("pod", "a")), from(peers(nsPodPeer(sel("team", "red"), sel("pod", "b")), podPeer(sel("pod", "b"))), port("", 80), port("", 81))),
		withIngress(np("y", "p2", sel()), from(peers(nsPodPeer(expr("team", "In", "red"), sel("pod", "b")), podPeer(sel("pod", "b"))), port("", 81), port(corev1.ProtocolTCP, 80))),
		withEgress(np("z", "p3", sel("pod", "c"), out), to(peers(cidrPeer("10.0.0.0/8", "10.1.0.0/16", "10.1.0.0/16")), portRange(80, 81))),
	)
	ir := Compile(s, Options{})
	var keys []string
	for _, p := range ir.PeerSets {
		keys = append(keys, p.Key)
	}
	want := []string{"ns=x;pods=pod in (b)", "ns=y;pods=pod in (b)", "nss=team in (red);pods=pod in (b)"}
	if !reflect.DeepEqual(keys, want) {
		t.Errorf("peer sets %q, want %q", keys, want)
	}
	shared := ir.PeerSets[2]
	wantV4 := []netip.Addr{netip.MustParseAddr("10.2.0.2")}
	wantV6 := []netip.Addr{netip.MustParseAddr("fd00:2::2")}
	if !reflect.DeepEqual(shared.V4, wantV4) || !reflect.DeepEqual(shared.V6, wantV6) {
		t.Errorf("shared set %+v, want %v %v", shared, wantV4, wantV6)
	}
	if len(ir.PortSets) != 1 || ir.PortSets[0].Key != "tcp/80-81" {
		t.Errorf("port sets %+v, want the one tcp/80-81 of all three rules", ir.PortSets)
	}
	if len(ir.CIDRSets) != 1 || ir.CIDRSets[0].Key != "10.0.0.0/8 except 10.1.0.0/16" || len(ir.CIDRSets[0].V4) != 8 {
		t.Errorf("cidr sets %+v", ir.CIDRSets)
	}
	xa, ya := findPod(ir, "x", "a"), findPod(ir, "y", "a")
	rx, ry := xa.Ingress.Rules[0], ya.Ingress.Rules[0]
	if rx.PeerSets[1] != shared.Key || ry.PeerSets[1] != shared.Key || rx.PortSet != ry.PortSet || rx.PeerSets[0] == ry.PeerSets[0] {
		t.Errorf("x/a rule %+v, y/a rule %+v: want the shared peer and port sets, and each its own namespace's", rx, ry)
	}
}

// TestCompileNamedPorts: an ingress named port is resolved into the
// pod's port set (pods that resolve it alike share the rule); an egress
// one becomes a set of destination . protocol . port per peer.
func TestCompileNamedPorts(t *testing.T) {
	s := fixture(
		withIngress(np("x", "in", sel()), from(nil, namedPort("", "http"))),
		withEgress(np("z", "out", sel("pod", "a"), out), to(peers(nsPeer(sel("team", "red"))), namedPort("", "http"), port("", 443))),
	)
	ir := Compile(s, Options{})
	xa, xb, xc := findPod(ir, "x", "a"), findPod(ir, "x", "b"), findPod(ir, "x", "c")
	if xa.Ingress.Rules[0].PortSet != "tcp/8080" || xb.Ingress.Rules[0].PortSet != "tcp/80" {
		t.Errorf("x/a ports %q, x/b ports %q", xa.Ingress.Rules[0].PortSet, xb.Ingress.Rules[0].PortSet)
	}
	if xa.Ingress.Rules[0] != xc.Ingress.Rules[0] {
		t.Errorf("x/a and x/c resolve http alike but do not share the rule")
	}
	r := findPod(ir, "z", "a").Egress.Rules[0]
	if !reflect.DeepEqual(r.NamedPortSets, []string{"nss=team in (red);pods=* port tcp/http"}) || r.PortSet != "tcp/443" {
		t.Fatalf("egress rule %+v", r)
	}
	ns := ir.NamedPortSets[0]
	want := []PortElem{
		{netip.MustParseAddr("10.2.0.1"), TCP, 8080},
		{netip.MustParseAddr("10.2.0.2"), TCP, 80},
		{netip.MustParseAddr("10.2.0.3"), TCP, 8080},
	}
	if !reflect.DeepEqual(ns.V4, want) || len(ns.V6) != 3 {
		t.Errorf("named set %+v, want v4 %v and 3 v6", ns, want)
	}
}

// TestCompileDeterministic: the order of the inputs does not show in the
// IR, so a renderer can diff two compilations.
func TestCompileDeterministic(t *testing.T) {
	for seed := range uint64(100) {
		r := rand.New(rand.NewPCG(seed, 1))
		s := randomSnapshot(r)
		want := Compile(s, Options{})
		shuffled := *s
		shuffled.Pods = slices.Clone(s.Pods)
		shuffled.Policies = slices.Clone(s.Policies)
		shuffled.Namespaces = slices.Clone(s.Namespaces)
		shuffled.Nodes = slices.Clone(s.Nodes)
		r.Shuffle(len(shuffled.Pods), func(i, j int) { shuffled.Pods[i], shuffled.Pods[j] = shuffled.Pods[j], shuffled.Pods[i] })
		r.Shuffle(len(shuffled.Policies), func(i, j int) {
			shuffled.Policies[i], shuffled.Policies[j] = shuffled.Policies[j], shuffled.Policies[i]
		})
		r.Shuffle(len(shuffled.Namespaces), func(i, j int) {
			shuffled.Namespaces[i], shuffled.Namespaces[j] = shuffled.Namespaces[j], shuffled.Namespaces[i]
		})
		slices.Reverse(shuffled.Nodes)
		if got := Compile(&shuffled, Options{}); !reflect.DeepEqual(got, want) {
			t.Fatalf("seed %d: IR depends on input order:\n%+v\n%+v", seed, got, want)
		}
	}
}

// TestCompileForNode: an agent compiles for its node's pods only and gets
// exactly their part of the cluster's IR, with only the sets they use.
func TestCompileForNode(t *testing.T) {
	for seed := range uint64(100) {
		s := randomSnapshot(rand.New(rand.NewPCG(seed, 2)))
		full := Compile(s, Options{})
		for _, node := range []string{"n1", "n2"} {
			ir := Compile(s, Options{Node: node})
			var want []PodRules
			for _, p := range full.Pods {
				if p.Node == node {
					want = append(want, p)
				}
			}
			if !reflect.DeepEqual(ir.Pods, want) {
				t.Fatalf("seed %d node %s: pods\n%+v\nwant\n%+v", seed, node, ir.Pods, want)
			}
			for _, ps := range ir.PeerSets {
				if !slices.ContainsFunc(full.PeerSets, func(f PeerSet) bool { return reflect.DeepEqual(f, ps) }) {
					t.Fatalf("seed %d node %s: peer set %+v not in the full IR", seed, node, ps)
				}
			}
		}
	}
}

// TestCompileKeepsNoInput: Compile neither changes its input nor keeps
// slices of it that a later change of the input would show through.
func TestCompileKeepsNoInput(t *testing.T) {
	s := fixture(np("x", "deny", sel(), networkingv1.PolicyTypeIngress))
	ir := Compile(s, Options{})
	s.Pods[0].IPs[0] = netip.MustParseAddr("1.1.1.1")
	s.Nodes[0].IPs[0] = netip.MustParseAddr("1.1.1.1")
	if ir.Pods[0].IPs[0] == netip.MustParseAddr("1.1.1.1") || ir.Nodes[0].IPs[0] == netip.MustParseAddr("1.1.1.1") {
		t.Errorf("the IR shares address slices with the snapshot")
	}
}
