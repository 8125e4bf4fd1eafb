package policy

import (
	"reflect"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// checkExplanation checks that e agrees with Decide's d: the same
// decision, and on each side the rules it says allow are AllowedBy.
func checkExplanation(t *testing.T, e Explanation, d Decision) {
	t.Helper()
	if !reflect.DeepEqual(e.Decision, d) {
		t.Errorf("Explain %s, Decide %s", e.Decision, d)
	}
	for _, side := range []struct {
		v     Verdict
		rules []RuleMatch
	}{{d.Egress, e.EgressRules}, {d.Ingress, e.IngressRules}} {
		var allows []RuleRef
		for _, m := range side.rules {
			if !slices.Contains(side.v.IsolatedBy, m.Rule.Policy) {
				t.Errorf("rule %v of a policy that does not isolate (%v)", m.Rule, side.v.IsolatedBy)
			}
			if m.Allows() {
				allows = append(allows, m.Rule)
			}
		}
		if side.v.Reason == AllowedByRule && !reflect.DeepEqual(allows, side.v.AllowedBy) {
			t.Errorf("rules that allow %v, AllowedBy %v", allows, side.v.AllowedBy)
		}
		if side.v.Reason == Denied && len(allows) > 0 {
			t.Errorf("denied, but rules %v allow", allows)
		}
	}
	for _, side := range []struct {
		v     Verdict
		rules []ClusterRuleMatch
	}{{d.Egress, e.EgressClusterRules}, {d.Ingress, e.IngressClusterRules}} {
		first := map[Tier]*ClusterRuleRef{}
		for _, m := range side.rules {
			if m.Matches() && first[m.Rule.Tier] == nil {
				first[m.Rule.Tier] = &m.Rule
			}
		}
		if side.v.Admin != nil && !reflect.DeepEqual(side.v.Admin, first[AdminTier]) {
			t.Errorf("Admin rule %v, first matching %v", side.v.Admin, first[AdminTier])
		}
		if side.v.Baseline != nil && !reflect.DeepEqual(side.v.Baseline, first[BaselineTier]) {
			t.Errorf("Baseline rule %v, first matching %v", side.v.Baseline, first[BaselineTier])
		}
	}
}

// TestExplainMatches pins which peer and port of each rule Explain names.
func TestExplainMatches(t *testing.T) {
	s := fixture(
		withIngress(np("x", "web", sel("pod", "b")),
			from(peers(podPeer(sel("pod", "c")), podPeer(sel("pod", "a"))), port(corev1.ProtocolUDP, 53), namedPort("", "http")),
			from(nil, port("", 9)),
			from(peers(cidrPeer("10.0.0.0/8", "10.2.0.0/16")))),
		np("x", "deny", sel()),
		withEgress(np("z", "out", sel("pod", "a"), "Egress"), to(peers(nsPeer(sel("team", "red"))))),
	)
	tests := []struct {
		name, src, dst string
		proto          Protocol
		port           uint16
		egress, in     []RuleMatch
	}{{
		name: "second peer, named port", src: "x/a", dst: "x/b", proto: TCP, port: 80,
		in: []RuleMatch{{RuleRef{"x/web", 0}, 1, 1}, {RuleRef{"x/web", 1}, Every, NoMatch}, {RuleRef{"x/web", 2}, 0, Every}},
	}, {
		name: "no port matches, the ipBlock's except", src: "y/a", dst: "x/b", proto: TCP, port: 81,
		in: []RuleMatch{{RuleRef{"x/web", 0}, NoMatch, NoMatch}, {RuleRef{"x/web", 1}, Every, NoMatch}, {RuleRef{"x/web", 2}, NoMatch, Every}},
	}, {
		name: "every peer, first port; egress by namespace", src: "z/a", dst: "y/b", proto: TCP, port: 9,
		egress: []RuleMatch{{RuleRef{"z/out", 0}, 0, Every}},
	}, {
		name: "a policy without rules lists none", src: "x/b", dst: "x/c", proto: TCP, port: 80,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, dst := ep(s, tt.src), ep(s, tt.dst)
			e := Explain(s, src, dst, tt.proto, tt.port)
			checkExplanation(t, e, Decide(s, src, dst, tt.proto, tt.port))
			if !reflect.DeepEqual(e.EgressRules, tt.egress) {
				t.Errorf("egress rules %+v, want %+v", e.EgressRules, tt.egress)
			}
			if !reflect.DeepEqual(e.IngressRules, tt.in) {
				t.Errorf("ingress rules %+v, want %+v", e.IngressRules, tt.in)
			}
		})
	}
}
