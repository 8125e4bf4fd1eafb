package policyrules

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/google/nftables"
	"github.com/google/nftables/expr"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/podnet/podnet/netns"
)

// Small builders of API policies, for readable tests.

func netpol(ns, name string, sel map[string]string, types ...networkingv1.PolicyType) *networkingv1.NetworkPolicy {
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchLabels: sel}, PolicyTypes: types},
	}
}

func podPeer(sel map[string]string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: sel}}
}

func nsPodPeer(nsSel, sel map[string]string) networkingv1.NetworkPolicyPeer {
	p := networkingv1.NetworkPolicyPeer{NamespaceSelector: &metav1.LabelSelector{MatchLabels: nsSel}}
	if sel != nil {
		p.PodSelector = &metav1.LabelSelector{MatchLabels: sel}
	}
	return p
}

func blockPeer(cidr string, except ...string) networkingv1.NetworkPolicyPeer {
	return networkingv1.NetworkPolicyPeer{IPBlock: &networkingv1.IPBlock{CIDR: cidr, Except: except}}
}

func numPort(proto corev1.Protocol, port int32, end ...int32) networkingv1.NetworkPolicyPort {
	p := networkingv1.NetworkPolicyPort{Protocol: &proto, Port: ptr(intstr.FromInt32(port))}
	if len(end) > 0 {
		p.EndPort = &end[0]
	}
	return p
}

func namedPort(proto corev1.Protocol, name string) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &proto, Port: ptr(intstr.FromString(name))}
}

func protoOnly(proto corev1.Protocol) networkingv1.NetworkPolicyPort {
	return networkingv1.NetworkPolicyPort{Protocol: &proto}
}

func ptr[T any](v T) *T { return &v }

// dumpTable renders the policy table of the namespace at path as sorted
// lines, counters zeroed: two ways to one state must dump alike.
func dumpTable(t testing.TB, path string) []string {
	t.Helper()
	var out []string
	must(t, netns.Do(path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tbl := table()
		chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
		if err != nil {
			return err
		}
		for _, ch := range chains {
			if ch.Table.Name != TableName {
				continue
			}
			rules, err := c.GetRules(tbl, ch)
			if err != nil {
				return err
			}
			for i, r := range rules {
				var parts []string
				for _, e := range r.Exprs {
					if cnt, ok := e.(*expr.Counter); ok {
						cnt.Packets, cnt.Bytes = 0, 0
					}
					if l, ok := e.(*expr.Lookup); ok {
						l.SetID = 0
					}
					parts = append(parts, fmt.Sprintf("%T%+v", e, e))
				}
				out = append(out, fmt.Sprintf("chain %s rule %d %q: %s", ch.Name, i, r.UserData, strings.Join(parts, " ")))
			}
			if len(rules) == 0 {
				out = append(out, "chain "+ch.Name+" empty")
			}
		}
		sets, err := c.GetSets(tbl)
		if err != nil {
			return err
		}
		for _, s := range sets {
			elems, err := c.GetSetElements(s)
			if err != nil {
				return err
			}
			var es []string
			for _, e := range elems {
				v := ""
				if e.VerdictData != nil {
					v = e.VerdictData.Chain
				}
				es = append(es, fmt.Sprintf("%x-%x/%v/%s", e.Key, e.KeyEnd, e.IntervalEnd, v))
			}
			sort.Strings(es)
			out = append(out, fmt.Sprintf("set %s %s interval=%v map=%v %q: %v", s.Name, s.KeyType.Name, s.Interval, s.IsMap, s.Comment, es))
		}
		return nil
	}))
	slices.Sort(out)
	return out
}

// tableExists reports whether the namespace at path has the table.
func tableExists(t testing.TB, path string) bool {
	t.Helper()
	found := false
	must(t, netns.Do(path, func() error {
		c, err := nftables.New()
		if err != nil {
			return err
		}
		tables, err := c.ListTablesOfFamily(nftables.TableFamilyINet)
		for _, tb := range tables {
			found = found || tb.Name == TableName
		}
		return err
	}))
	return found
}

func addr(s string) netip.Addr { return netip.MustParseAddr(s) }
