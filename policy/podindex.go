package policy

import "slices"

// labelIndex holds, for a namespace, the pods policy applies to by label:
// "key\x00value" -> their indexes in the snapshot, ascending. Built for a
// namespace the first time a selector there has an In requirement, it
// makes a selector's pods cost the pods that carry one of its values
// instead of every pod of the namespace: 10,000 policies of one namespace
// that each select their own label are linear, not quadratic.
type labelIndex map[string][]int

// candidates returns the pods of namespace ns that sel may match, a
// superset of those it does, ascending: the caller still matches each.
func (c *compiler) candidates(ns string, sel *selector) []int {
	var in *requirement
	for i := range sel.reqs {
		if sel.reqs[i].op == opIn {
			in = &sel.reqs[i]
			break
		}
	}
	if in == nil || sel.none {
		return c.podsByNs[ns]
	}
	if c.labels == nil {
		c.labels = map[string]labelIndex{}
	}
	idx, ok := c.labels[ns]
	if !ok {
		idx = labelIndex{}
		for _, i := range c.podsByNs[ns] {
			for k, v := range c.s.Pods[i].Labels {
				idx[k+"\x00"+v] = append(idx[k+"\x00"+v], i)
			}
		}
		c.labels[ns] = idx
	}
	if len(in.values) == 1 {
		return idx[in.key+"\x00"+in.values[0]]
	}
	var out []int
	for _, v := range in.values {
		out = append(out, idx[in.key+"\x00"+v]...)
	}
	slices.Sort(out) // a pod has one value of a key: no duplicates
	return out
}
