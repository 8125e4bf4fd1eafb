package policy

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
)

// TestWithPodAddrsMatchesCompile: on random clusters (NetworkPolicies
// and ClusterNetworkPolicies), giving one, then a second pod without an
// address its addresses with WithPodAddrs, then a third pod new ones,
// yields what Compile of the snapshot with them does, for the whole
// cluster and for one node; and WithPodAddrs refuses what only Compile
// can tell (an old address another pod has, a pod it does not know).
func TestWithPodAddrsMatchesCompile(t *testing.T) {
	seeds := 600
	if testing.Short() {
		seeds = 100
	}
	fast := 0
	for seed := range seeds {
		fast += checkWithPodAddrs(t, uint64(seed))
	}
	if fast < seeds/2 {
		t.Fatalf("only %d of %d seeds took the fast way", fast, seeds)
	}
}

func checkWithPodAddrs(t *testing.T, seed uint64) (fast int) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 0x51ed27))
	s := randomSnapshot(r)
	// Two pods of n1 lose their addresses, as pods whose sandbox is
	// being made; a third one's is made again.
	var picked []int
	for _, i := range r.Perm(len(s.Pods)) {
		if p := &s.Pods[i]; !p.HostNetwork && p.Node == "n1" && len(picked) < 3 {
			if len(picked) < 2 {
				p.IPs = nil
			}
			picked = append(picked, i)
		}
	}
	saved := make([][]netip.Addr, len(picked))
	for n, i := range picked {
		saved[n] = s.Pods[i].IPs
	}
	for _, node := range []string{"", "n1"} {
		opts := Options{Node: node}
		ir := Compile(s, opts)
		for n, i := range picked {
			key := s.Pods[i].Key()
			addrs := randomAddrs(r, i)
			held := func(ip netip.Addr) bool { return heldByOther(s, i, ip) }
			got, ok := ir.WithPodAddrs(key, addrs, held)
			shared := slices.ContainsFunc(s.Pods[i].IPs, held)
			if !ok && !shared {
				t.Fatalf("seed %d node %q: WithPodAddrs(%s) refused a pod whose addresses are its own", seed, node, key)
			}
			if ok && shared {
				t.Fatalf("seed %d node %q: WithPodAddrs(%s) took a pod whose address another pod has", seed, node, key)
			}
			if !ok {
				continue
			}
			s.Pods[i].IPs = addrs
			want := Compile(s, opts)
			if a, b := irValue(got), irValue(want); !reflect.DeepEqual(a, b) {
				t.Fatalf("seed %d node %q, pod %d (%s) given %v:\nWithPodAddrs: %+v\nCompile:      %+v\n%s",
					seed, node, n, key, addrs, a, b, dump(s, want))
			}
			ir = got
			fast = 1
		}
		for n, i := range picked {
			s.Pods[i].IPs = saved[n]
		}
	}
	// A pod with addresses without held, and an unknown one, are
	// Compile's.
	for i := range s.Pods {
		if len(s.Pods[i].IPs) > 0 {
			if _, ok := Compile(s, Options{}).WithPodAddrs(s.Pods[i].Key(), randomAddrs(r, i), nil); ok {
				t.Fatalf("seed %d: WithPodAddrs took %s, which has addresses, without held", seed, s.Pods[i].Key())
			}
			break
		}
	}
	if _, ok := Compile(s, Options{}).WithPodAddrs(PodKey{"x", "nobody"}, randomAddrs(r, 1), nil); ok {
		t.Fatalf("seed %d: WithPodAddrs took a pod the snapshot does not have", seed)
	}
	return fast
}

// heldByOther reports whether a pod of s other than pod i has ip.
func heldByOther(s *Snapshot, i int, ip netip.Addr) bool {
	for j := range s.Pods {
		if j != i && slices.Contains(s.Pods[j].IPs, ip) {
			return true
		}
	}
	return false
}

// randomAddrs are a pod's new addresses: its own, or another pod's
// (a duplicate the sets must hold once), in one or both families.
func randomAddrs(r *rand.Rand, i int) []netip.Addr {
	if r.IntN(5) == 0 {
		i = r.IntN(8) // maybe another pod's
	}
	out := []netip.Addr{netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)})}
	switch r.IntN(3) {
	case 0:
		out = append(out, netip.MustParseAddr(fmt.Sprintf("fd00::%x", i+1)))
	case 1:
		out = []netip.Addr{netip.MustParseAddr(fmt.Sprintf("fd00::%x", i+1))}
	}
	return out
}

// irValue is the IR without what WithPodAddrs keeps of the compile.
func irValue(ir *IR) IR {
	v := *ir
	v.inc = nil
	v.Pods = slices.Clone(v.Pods)
	return v
}

// TestRuleEqualCoversFields: a copy of a rule with any one field changed
// is not equal to it (a field equal forgot would let the renderer's memo
// keep a chain built from other rules), and an equal copy in new slices
// is; the same for the tier rules and their directions.
func TestRuleEqualCoversFields(t *testing.T) {
	base := TierRule{
		Rule: Rule{Policy: "ns/p", Index: 1, AllPeers: false, PeerSets: []string{"a"}, CIDRSets: []string{"b"},
			AllPorts: false, PortSet: "c", NamedPortSets: []string{"d"}},
		Ref: ClusterRuleRef{Policy: "cp", Tier: AdminTier, Priority: 3, Index: 2, Name: "n", Action: Accept},
	}
	deepCopy := func(tr TierRule) *TierRule {
		tr.PeerSets = slices.Clone(tr.PeerSets)
		tr.CIDRSets = slices.Clone(tr.CIDRSets)
		tr.NamedPortSets = slices.Clone(tr.NamedPortSets)
		return &tr
	}
	if !deepCopy(base).equal(&base) {
		t.Fatal("a copy in new slices is not equal")
	}
	probe := *deepCopy(base)
	var walk func(v reflect.Value, path string)
	walk = func(v reflect.Value, path string) {
		for i := range v.NumField() {
			f, name := v.Field(i), path+v.Type().Field(i).Name
			if f.Kind() == reflect.Struct {
				walk(f, name+".")
				continue
			}
			saved := reflect.New(f.Type()).Elem()
			saved.Set(f)
			switch f.Kind() {
			case reflect.String:
				f.SetString(f.String() + "x")
			case reflect.Bool:
				f.SetBool(!f.Bool())
			case reflect.Int, reflect.Int32, reflect.Uint8:
				if f.CanInt() {
					f.SetInt(f.Int() + 1)
				} else {
					f.SetUint(f.Uint() + 1)
				}
			case reflect.Slice:
				f.Set(reflect.Append(f, reflect.ValueOf("z")))
			default:
				t.Fatalf("%s: a %s; teach this test (and equal) about it", name, f.Kind())
			}
			changed := *deepCopy(probe)
			f.Set(saved)
			if changed.equal(&base) || base.equal(&changed) {
				t.Errorf("rules differing in %s are equal", name)
			}
		}
	}
	walk(reflect.ValueOf(&probe).Elem(), "")

	d := Direction{Isolated: true, IsolatedBy: []string{"ns/p"}, Rules: []*Rule{&base.Rule}, Admin: []*TierRule{&base}}
	e := Direction{Isolated: true, IsolatedBy: []string{"ns/p"}, Rules: []*Rule{&deepCopy(base).Rule}, Admin: []*TierRule{deepCopy(base)}}
	if !d.EqualRules(&e) || d.sameRules(&e) {
		t.Errorf("directions of equal rules in new slices: EqualRules %v (want true), sameRules %v (want false)", d.EqualRules(&e), d.sameRules(&e))
	}
	e.Baseline = e.Admin
	if d.EqualRules(&e) {
		t.Error("a direction with baseline rules equals one without")
	}
}
