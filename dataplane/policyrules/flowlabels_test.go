package policyrules

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"

	"github.com/podnet/podnet/flows"
	"github.com/podnet/podnet/policy"
)

// These tests need no root: the ids, the label's layout, and that the
// ids the rules carry are the ones FlowIndex names.

func TestFlowLabelLayout(t *testing.T) {
	const eg, in = 0x0123456789abcdef, 0xfedcba9876543210
	b := FlowLabel(eg, in)
	if len(b) != 16 {
		t.Fatalf("label of %d bytes", len(b))
	}
	// Bit i of the label is bit i%32 of the host-order word i/32.
	words := []uint32{0x89abcdef, 0x01234567, 0x76543210, 0xfedcba98}
	for i, w := range words {
		if got := binaryutil.NativeEndian.Uint32(b[4*i:]); got != w {
			t.Errorf("word %d: %#x, want %#x", i, got, w)
		}
	}
	e, i, err := ParseFlowLabel(b)
	if err != nil || e != eg || i != in {
		t.Fatalf("ParseFlowLabel: %#x %#x %v", e, i, err)
	}
	// The kernel ORs the bits a rule sets: both sides' ids survive.
	or := slices.Clone(FlowLabel(eg, 0))
	for k, x := range FlowLabel(0, in) {
		or[k] |= x
	}
	if e, i, _ := ParseFlowLabel(or); e != eg || i != in {
		t.Fatalf("ORed label: %#x %#x", e, i)
	}
	if _, _, err := ParseFlowLabel(b[:8]); err == nil {
		t.Fatal("a short label parsed")
	}
}

func TestFlowPrefix(t *testing.T) {
	for _, id := range []uint64{1, 0xdeadbeef, ^uint64(0)} {
		p := FlowPrefix(id)
		if len(p) != len("podnet-flow ")+16 {
			t.Errorf("prefix %q", p)
		}
		if got, ok := ParseFlowPrefix(p); !ok || got != id {
			t.Errorf("ParseFlowPrefix(%q) = %#x %v", p, got, ok)
		}
	}
	for _, s := range []string{"podnet-guard", "podnet-deny ingress x/a", "podnet-flow 12", "podnet-flow 0000000000000000", "podnet-flow zzzzzzzzzzzzzzzz"} {
		if _, ok := ParseFlowPrefix(s); ok {
			t.Errorf("ParseFlowPrefix(%q) ok", s)
		}
	}
}

// TestFlowIDsStable pins the hash: an agent and a renderer of different
// podnet versions on one node must agree on every id.
func TestFlowIDsStable(t *testing.T) {
	got := []uint64{
		ruleID(npRule("x/db", Ingress, 0, "Allow")),
		ruleID(cnpRule(policy.ClusterRuleRef{Policy: "guard", Tier: policy.AdminTier, Index: 1, Action: policy.Deny}, Egress)),
		dropID(policy.PodKey{Namespace: "x", Name: "a"}, Ingress, []string{"x/db", "x/deny"}),
	}
	want := []uint64{0xee9a784455755c21, 0x3df76ed6d3bb74e8, 0x29e3d1eb8500293b}
	if !slices.Equal(got, want) {
		t.Fatalf("ids %#x, want %#x", got, want)
	}
	if dropID(policy.PodKey{Namespace: "x", Name: "a"}, Ingress, []string{"x/deny", "x/db"}) != got[2] {
		t.Fatal("the final drop's id depends on the order of its policies")
	}
}

// TestFlowIndexMatchesRules: on random clusters with both tiers, every
// rule that returns carries an id (unless it is the pod itself or an
// Admin Pass), every drop is preceded by a flow log rule, and FlowIndex
// names every id written, with the rule it belongs to, and no other.
func TestFlowIndexMatchesRules(t *testing.T) {
	tp := &topology{}
	for i := range 5 {
		p := &podNS{}
		p.v4, p.v6 = podAddrs(i)
		tp.pods = append(tp.pods, p)
	}
	rng := rand.New(rand.NewPCG(32, 7))
	for range 100 {
		s := randomClusterWithTiers(rng, tp)
		ir := policy.Compile(s, policy.Options{Node: "n1"})
		index := FlowIndex(ir, "n1")
		written := map[uint64]bool{}
		rs := buildWith(ir, "n1", buildOptions{flow: true, denyLog: rng.IntN(2) == 0})
		for _, c := range rs.chains {
			for k, r := range c.rules {
				checkFlowRule(t, c, k, r, index)
				if r.flowID != 0 {
					written[r.flowID] = true
				}
			}
		}
		for id := range index {
			if !written[id] && !unwritable(index[id]) {
				t.Errorf("FlowIndex names %#x (%+v), which no rule carries", id, index[id])
			}
		}
	}
}

// checkFlowRule checks the id of rule k of chain c against the index.
func checkFlowRule(t *testing.T, c *chain, k int, r rule, index map[uint64][]flows.Rule) {
	t.Helper()
	named := index[r.flowID]
	switch {
	case r.kind == ruleSelf || r.kind == ruleGoto || r.kind == ruleLog || r.kind == ruleDeny || r.verdict == verdictGoto ||
		r.verdict == verdictLog || r.verdict == verdictDrop:
		if r.flowID != 0 {
			t.Errorf("chain %s rule %d (%s) carries an id", c.name, k, r.comment(c))
		}
		if r.kind == ruleDeny || r.verdict == verdictDrop {
			if prev := c.rules[k-1]; prev.kind != ruleFlowLog && prev.verdict != verdictFlowLog {
				t.Errorf("chain %s rule %d (%s) drops without the flow log before it", c.name, k, r.comment(c))
			}
		}
	case r.flowID == 0 || len(named) != 1 && r.kind != ruleFlowLog:
		t.Errorf("chain %s rule %d (%s): id %#x names %+v", c.name, k, r.comment(c), r.flowID, named)
	case r.kind == ruleFlowLog:
		for _, fr := range named {
			if fr.Kind != kindNetworkPolicy || fr.Index != -1 || fr.Action != "Deny" || fr.Direction != c.dir.String() {
				t.Errorf("chain %s final drop names %+v", c.name, named)
			}
		}
	case r.tier != 0:
		want := cnpRule(policy.ClusterRuleRef{Policy: r.policy, Tier: r.tier, Index: r.index, Action: r.action}, c.dir)
		if named[0] != want {
			t.Errorf("chain %s rule %d (%s) names %+v, want %+v", c.name, k, r.comment(c), named[0], want)
		}
	default:
		if want := npRule(r.policy, c.dir, r.index, "Allow"); named[0] != want {
			t.Errorf("chain %s rule %d (%s) names %+v, want %+v", c.name, k, r.comment(c), named[0], want)
		}
	}
}

// unwritable reports whether rules may have no nftables rule: a rule
// that can match nothing (a ClusterNetworkPolicy rule is in the IR even
// then) renders to none. A final drop is always written.
func unwritable(rules []flows.Rule) bool {
	return len(rules) == 1 && rules[0].Index >= 0
}

// TestWithoutFlowLabelsUnchanged: a Renderer without the option writes
// the rules it wrote before the option existed: the option's ruleset,
// less its flow log rules and ids, is the plain one, and the plain one's
// expressions hold no label and no flow log.
func TestWithoutFlowLabelsUnchanged(t *testing.T) {
	tp := &topology{}
	for i := range 5 {
		p := &podNS{}
		p.v4, p.v6 = podAddrs(i)
		tp.pods = append(tp.pods, p)
	}
	rng := rand.New(rand.NewPCG(32, 8))
	for range 50 {
		ir := policy.Compile(randomClusterWithTiers(rng, tp), policy.Options{Node: "n1"})
		deny := rng.IntN(2) == 0
		plain, flow := build(ir, "n1", deny), buildWith(ir, "n1", buildOptions{denyLog: deny, flow: true})
		if len(plain.chains) != len(flow.chains) {
			t.Fatalf("%d chains, %d with flow labels", len(plain.chains), len(flow.chains))
		}
		b := newBatch(nil)
		b.denyLog = &DenyLog{Group: 1, Rate: 1, Burst: 1}
		for name, c := range flow.chains {
			var stripped []rule
			for _, r := range c.rules {
				if r.kind != ruleFlowLog && r.verdict != verdictFlowLog {
					r.flowID = 0
					stripped = append(stripped, r)
				}
			}
			if !slices.Equal(stripped, plain.chains[name].rules) {
				t.Fatalf("chain %s: without flow labels %+v, with them stripped %+v", name, plain.chains[name].rules, stripped)
			}
			for _, r := range plain.chains[name].rules {
				for _, e := range b.exprs(r, plain.chains[name]) {
					if ct, ok := e.(*expr.Ct); ok && ct.Key == expr.CtKeyLABELS {
						t.Fatalf("chain %s: a label without the option", name)
					}
					if l, ok := e.(*expr.Log); ok && strings.HasPrefix(string(l.Data), "podnet-flow") {
						t.Fatalf("chain %s: a flow log without the option", name)
					}
				}
			}
		}
	}
}
