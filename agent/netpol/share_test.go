package netpol

import (
	"fmt"
	"maps"
	"reflect"
	"testing"

	networkingv1 "k8s.io/api/networking/v1"

	"github.com/podnet/podnet/policy"
)

func sharePod(i int, hash string) policy.Pod {
	return policy.Pod{Namespace: "ns", Name: fmt.Sprint("p", i),
		Labels: map[string]string{"app": "web", "pod-template-hash": hash},
		Ports:  append(make([]policy.NamedPort, 0, 4), policy.NamedPort{Name: "http", Protocol: policy.TCP, Port: 8080})}
}

func TestShareTable(t *testing.T) {
	tab := newShareTable()
	a, b, c := sharePod(1, "h1"), sharePod(2, "h1"), sharePod(3, "h2")
	for _, p := range []*policy.Pod{&a, &b, &c} {
		tab.share(p)
	}
	if reflect.ValueOf(a.Labels).UnsafePointer() != reflect.ValueOf(b.Labels).UnsafePointer() {
		t.Error("two pods with equal labels hold two maps")
	}
	if reflect.ValueOf(a.Labels).UnsafePointer() == reflect.ValueOf(c.Labels).UnsafePointer() {
		t.Error("pods with different labels share a map")
	}
	if !maps.Equal(c.Labels, map[string]string{"app": "web", "pod-template-hash": "h2"}) {
		t.Errorf("labels changed: %v", c.Labels)
	}
	if &a.Ports[0] != &c.Ports[0] {
		t.Error("equal port lists are not shared")
	}
	if cap(a.Ports) != len(a.Ports) {
		t.Errorf("a shared port list has room to append into: len %d cap %d", len(a.Ports), cap(a.Ports))
	}
	if got := tab.size(); got != 3 {
		t.Errorf("size %d, want 3 (two label sets, one port list)", got)
	}

	// A rollout after another, 3,000 label sets one after the other with
	// one pod alive at a time: old sets stay until the table reaches its
	// limit; then only what the pods hold remains.
	var live []policy.Pod
	peak := 0
	for i := range 3 * minShareLimit {
		p := sharePod(i, fmt.Sprint("r", i))
		tab.share(&p)
		live = []policy.Pod{p}
		tab.sweep(live, nil)
		peak = max(peak, tab.size())
	}
	if peak > minShareLimit {
		t.Errorf("the table grew to %d sets for one live pod, past its limit %d", peak, minShareLimit)
	}
	// Below the limit a sweep changes nothing.
	before := tab.size()
	d := sharePod(9, "other")
	tab.share(&d)
	tab.sweep(live, nil)
	if got := tab.size(); got != before+1 {
		t.Errorf("a sweep below the limit dropped sets: size %d, want %d", got, before+1)
	}
}

func TestLabelsKey(t *testing.T) {
	k1, _ := labelsKey(nil, nil, map[string]string{"a": "b", "c": "d"})
	k2, _ := labelsKey(nil, nil, map[string]string{"c": "d", "a": "b"})
	k3, _ := labelsKey(nil, nil, map[string]string{"a": "bc", "": "d"})
	if string(k1) != string(k2) {
		t.Errorf("equal maps, different keys: %q %q", k1, k2)
	}
	if string(k1) == string(k3) {
		t.Errorf("different maps, one key %q", k1)
	}
}

func TestSharePolicy(t *testing.T) {
	tab := newShareTable()
	a, b := decodedPolicy(0, 3), decodedPolicy(1, 3) // equal selectors, other namespaces
	tab.sharePolicy(&a.Spec)
	tab.sharePolicy(&b.Spec)
	same := func(x, y map[string]string) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	if !same(a.Spec.PodSelector.MatchLabels, b.Spec.PodSelector.MatchLabels) {
		t.Error("equal podSelectors hold two maps")
	}
	pa, pb := a.Spec.Ingress[0].From[0], b.Spec.Ingress[0].From[0]
	if !same(pa.NamespaceSelector.MatchLabels, pb.NamespaceSelector.MatchLabels) || !same(pa.PodSelector.MatchLabels, pb.PodSelector.MatchLabels) {
		t.Error("equal peer selectors hold two maps")
	}
	if !maps.Equal(a.Spec.PodSelector.MatchLabels, map[string]string{"app": "app-3"}) {
		t.Errorf("podSelector changed: %v", a.Spec.PodSelector.MatchLabels)
	}
	// A pod with the labels a selector names shares the map too: one
	// table for both.
	p := policy.Pod{Namespace: "x", Name: "p", Labels: map[string]string{"app": "app-3"}}
	tab.share(&p)
	if !same(p.Labels, a.Spec.PodSelector.MatchLabels) {
		t.Error("a pod's labels equal to a selector's are not shared")
	}
	// A sweep enters cached policies' maps without writing to them.
	c := decodedPolicy(2, 3)
	before := c.Spec.PodSelector.MatchLabels
	tab.limit = 0
	tab.sweep(nil, []*networkingv1.NetworkPolicy{c})
	if !same(c.Spec.PodSelector.MatchLabels, before) {
		t.Error("the sweep wrote to a cached policy")
	}
}
