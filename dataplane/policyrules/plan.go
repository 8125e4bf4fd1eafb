package policyrules

import (
	"net/netip"
	"slices"
)

// plan is what turns one ruleset into another: it is computed without
// netlink, and committed as one batch in the order that keeps every
// reference valid (sets before the rules that read them, map entries out
// before their chains go, chains in before the map entries that jump to
// them, rules out before their sets go).
type plan struct {
	newSets    []*set
	setChanges []setChange
	delSets    []string
	newChains  []*chain // created, then filled
	modChains  []*chain // flushed, then filled
	delChains  []string
	// mapDels and mapAdds are the element changes of the dispatch maps
	// and of the fold maps that stay.
	mapDels  []mapEntry // entries gone or pointing elsewhere now
	mapAdds  []mapEntry
	newFolds []*fold // created with their elements
	delFolds []string
}

// setChange is the change of a set that stays: elements in and out, or,
// for an interval set, a flush and the whole new content (removing an
// interval by its bounds would have to match the kernel's own split).
type setChange struct {
	set      *set
	add, del []element
	replace  bool
}

type mapEntry struct {
	m     string
	addr  netip.Addr
	chain string
}

// Stats counts what an Apply changed.
type Stats struct {
	SetsAdded, SetsChanged, SetsRemoved         int
	ElementsAdded, ElementsRemoved              int
	ChainsAdded, ChainsRewritten, ChainsRemoved int
	MapEntriesAdded, MapEntriesRemoved          int
}

func (p *plan) stats() Stats {
	s := Stats{
		SetsAdded: len(p.newSets) + len(p.newFolds), SetsChanged: len(p.setChanges), SetsRemoved: len(p.delSets) + len(p.delFolds),
		ChainsAdded: len(p.newChains), ChainsRewritten: len(p.modChains), ChainsRemoved: len(p.delChains),
		MapEntriesAdded: len(p.mapAdds), MapEntriesRemoved: len(p.mapDels),
	}
	for _, n := range p.newSets {
		s.ElementsAdded += len(n.elems)
	}
	for _, c := range p.setChanges {
		s.ElementsAdded += len(c.add)
		s.ElementsRemoved += len(c.del)
	}
	for _, f := range p.newFolds {
		s.MapEntriesAdded += len(f.elems)
	}
	return s
}

func (p *plan) empty() bool { return p.stats() == Stats{} }

// diff plans the change from cur (what is programmed) to want.
func diff(cur, want *ruleset) *plan {
	p := &plan{}
	for _, name := range sortedKeys(want.sets) {
		w := want.sets[name]
		c, ok := cur.sets[name]
		if !ok {
			p.newSets = append(p.newSets, w)
			continue
		}
		if slices.EqualFunc(c.elems, w.elems, func(a, b element) bool { return a == b }) {
			continue
		}
		if w.kind.interval() {
			p.setChanges = append(p.setChanges, setChange{set: w, add: w.elems, del: c.elems, replace: true})
			continue
		}
		add, del := elemDiff(c.elems, w.elems)
		p.setChanges = append(p.setChanges, setChange{set: w, add: add, del: del})
	}
	for _, name := range sortedKeys(cur.sets) {
		if _, ok := want.sets[name]; !ok {
			p.delSets = append(p.delSets, name)
		}
	}
	p.chainDiff(cur.chains, want.chains)
	for _, m := range []string{mapIn4, mapIn6, mapOut4, mapOut6} {
		p.mapDiff(m, cur.maps[m], want.maps[m])
	}
	for _, name := range sortedKeys(want.folds) {
		if c, ok := cur.folds[name]; ok {
			p.mapDiff(name, c.elems, want.folds[name].elems)
		} else {
			p.newFolds = append(p.newFolds, want.folds[name])
		}
	}
	for _, name := range sortedKeys(cur.folds) {
		if _, ok := want.folds[name]; !ok {
			p.delFolds = append(p.delFolds, name)
		}
	}
	return p
}

// chainDiff plans the change of the chains from cur to want.
func (p *plan) chainDiff(cur, want map[string]*chain) {
	for _, name := range sortedKeys(want) {
		w := want[name]
		c, ok := cur[name]
		switch {
		case !ok:
			p.newChains = append(p.newChains, w)
		case c != w && !slices.Equal(c.rules, w.rules):
			p.modChains = append(p.modChains, w)
		}
	}
	for _, name := range sortedKeys(cur) {
		if _, ok := want[name]; !ok {
			p.delChains = append(p.delChains, name)
		}
	}
}

// mapDiff plans the change of map m's entries from cm to wm.
func (p *plan) mapDiff(m string, cm, wm map[netip.Addr]string) {
	for _, a := range sortedAddrs(cm) {
		if wc, ok := wm[a]; !ok || wc != cm[a] {
			p.mapDels = append(p.mapDels, mapEntry{m, a, cm[a]})
		}
	}
	for _, a := range sortedAddrs(wm) {
		if cc, ok := cm[a]; !ok || cc != wm[a] {
			p.mapAdds = append(p.mapAdds, mapEntry{m, a, wm[a]})
		}
	}
}

// elemDiff returns what is in want and not in cur, and the reverse; both
// are sorted.
func elemDiff(cur, want []element) (add, del []element) {
	i, j := 0, 0
	for i < len(cur) || j < len(want) {
		switch {
		case j == len(want) || (i < len(cur) && compareElements(cur[i], want[j]) < 0):
			del = append(del, cur[i])
			i++
		case i == len(cur) || compareElements(cur[i], want[j]) > 0:
			add = append(add, want[j])
			j++
		default:
			i++
			j++
		}
	}
	return add, del
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func sortedAddrs(m map[netip.Addr]string) []netip.Addr {
	keys := make([]netip.Addr, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, netip.Addr.Compare)
	return keys
}
