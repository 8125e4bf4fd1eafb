package dataplane

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftelem"
	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/tag"
)

// Masq programs the masquerade of pod traffic that leaves the node, over
// netlink: one table, and per network one chain with two rules and sets
// of pod addresses. A pod joins or leaves by having its addresses added
// to or removed from a set; the rules never change per pod.
//
// Several plugin processes run at once. Every object is created with
// NLM_F_CREATE and no NLM_F_EXCL, so creating what exists is a no-op,
// and the rules are replaced by one atomic batch (flush the chain, add
// both rules): racing writers leave exactly one copy.
type Masq struct {
	conn *nftables.Conn
	// elems gets elements by key, on conn's socket; nil: sets are listed.
	elems *nftelem.Conn
}

// NewMasq opens an nftables connection in the calling thread's network
// namespace; like a netlink handle, it stays bound to it.
func NewMasq() (*Masq, error) {
	c, elems, err := nftelem.Lasting()
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	return &Masq{conn: c, elems: elems}, nil
}

// MasqOn is a Masq on a connection the caller owns (and closes), so
// that its changes can share a batch with the caller's. elems gets
// elements by key on the same socket (nftelem.Lasting), which
// QueueRemoveOwned uses instead of listing the pod sets; nil lists them.
func MasqOn(c *nftables.Conn, elems *nftelem.Conn) *Masq {
	return &Masq{conn: c, elems: elems}
}

// Close releases the connection.
func (m *Masq) Close() error { return m.conn.CloseLasting() }

// maxAttempts bounds the retries of a batch that lost a race (EEXIST,
// EBUSY, EINTR from a concurrent transaction).
const maxAttempts = 3

func retryable(err error) bool {
	return errors.Is(err, unix.EEXIST) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN)
}

// declare queues the creation of the table, its layout marker, the
// chain and the four sets. The caller has checked the table's layout
// (adopt).
func (m *Masq) declare(o *masqObjects) error {
	m.conn.AddTable(o.table)
	if err := nftlayout.Declare(m.conn, o.table, MasqLayout, o.found); err != nil {
		return err
	}
	m.conn.AddChain(o.chain)
	for _, s := range []*nftables.Set{o.pods4, o.pods6, o.exclude4, o.exclude6} {
		if err := m.conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("nftables: declare set %s: %w", s.Name, err)
		}
	}
	return nil
}

// AddPod puts addrs in the network's pod sets with owner's comment, and
// makes sure the network's table, chain, sets and rules exist, with the
// exclusions n describes. The exclusion sets only ever hold network-level
// prefixes: a pod's ADD and DEL touch the pod sets alone (but for the
// subnets of ExcludeAdded, which are added when new).
func (m *Masq) AddPod(n MasqNetwork, owner tag.Owner, addrs []netip.Addr) error {
	o := newMasqObjects(n.Network)
	var excl []netip.Prefix
	if n.ExcludeAdded {
		excl = n.Exclude
	}
	// Fast path, when the network's objects exist: a batch of new
	// elements only. Unlike re-declaring the chain (an update that the
	// kernel frees after an RCU grace period), it leaves no deferred work
	// behind, and deferred work is what makes closing an nftables socket
	// slow: the kernel flushes it, with a synchronize_rcu, on the close.
	if err := m.addPodBatch(o, owner, addrs, excl, false); err == nil {
		return m.ensureRules(o, n)
	}
	if err := m.adopt(o); err != nil {
		return err
	}
	var err error
	for attempt := 0; ; attempt++ {
		err = m.addPodBatch(o, owner, addrs, excl, true)
		if err == nil || !retryable(err) || attempt+1 == maxAttempts {
			break
		}
		// An exclusion that overlaps one already there fails the batch
		// (the kernel refuses overlapping intervals). A covered subnet
		// needs nothing; anything else is a real error.
		var lerr error
		if excl, lerr = m.uncovered(o, excl); lerr != nil {
			return lerr
		}
	}
	if err != nil {
		return fmt.Errorf("nftables: add %v to the masquerade of %s: %w", addrs, n.Network, err)
	}
	return m.ensureRules(o, n)
}

func (m *Masq) addPodBatch(o *masqObjects, owner tag.Owner, addrs []netip.Addr, excl []netip.Prefix, declare bool) error {
	if declare {
		if err := m.declare(o); err != nil {
			return err
		}
	}
	for _, a := range addrs {
		if err := m.conn.SetAddElements(o.podSet(a), []nftables.SetElement{{Key: a.AsSlice(), Comment: owner.Comment()}}); err != nil {
			return err
		}
	}
	for _, p := range excl {
		if err := m.conn.SetAddElements(o.excludeSet(p.Addr()), intervalElements(p)); err != nil {
			return err
		}
	}
	return m.conn.Flush()
}

// adopt reads the table's layout version before a batch that declares
// objects or replaces rules: a table of a newer podnet is left alone.
// Never on the fast path, which only adds elements.
func (m *Masq) adopt(o *masqObjects) error {
	found, err := nftlayout.Check(m.conn, o.table, MasqLayout)
	if err != nil {
		return err
	}
	o.found = found
	return nil
}

// uncovered returns the subnets that the exclusion sets do not cover.
func (m *Masq) uncovered(o *masqObjects, subnets []netip.Prefix) ([]netip.Prefix, error) {
	var out []netip.Prefix
	lists := map[*nftables.Set][]nftables.SetElement{}
	for _, p := range subnets {
		s := o.excludeSet(p.Addr())
		elems, ok := lists[s]
		if !ok {
			var err error
			if elems, err = m.conn.GetSetElements(s); err != nil {
				return nil, fmt.Errorf("nftables: list %s: %w", s.Name, err)
			}
			lists[s] = elems
		}
		if !intervalsCover(elems, p) {
			out = append(out, p)
		}
	}
	return out, nil
}

// ensureRules replaces the chain's rules unless they are already the
// current ones. The replacement is one batch: concurrent callers each
// flush and add, and whichever commits last leaves its two rules.
func (m *Masq) ensureRules(o *masqObjects, n MasqNetwork) error {
	got, err := m.conn.GetRules(o.table, o.chain)
	if err == nil && rulesCurrent(got, n) {
		return nil
	}
	if err := m.adopt(o); err != nil {
		return err
	}
	for attempt := 0; ; attempt++ {
		if err = m.replaceRules(o, n); err == nil || !retryable(err) || attempt+1 == maxAttempts {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("nftables: program the masquerade rules of %s: %w", n.Network, err)
	}
	return nil
}

func (m *Masq) replaceRules(o *masqObjects, n MasqNetwork) error {
	if err := m.declare(o); err != nil {
		return err
	}
	// The exclusions start over with the rules: what an older podnet or
	// an earlier configuration put there (before v2, every routed pod's
	// own /32) goes. With ExcludeAdded, the subnets of the pods that come
	// later are added by their ADDs.
	m.conn.FlushSet(o.exclude4)
	m.conn.FlushSet(o.exclude6)
	for _, p := range append(append([]netip.Prefix(nil), alwaysExcluded...), n.Exclude...) {
		if err := m.conn.SetAddElements(o.excludeSet(p.Addr()), intervalElements(p)); err != nil {
			return err
		}
	}
	m.conn.FlushChain(o.chain)
	for _, r := range o.rules(n) {
		m.conn.AddRule(r)
	}
	return m.conn.Flush()
}

// RemovePod takes addrs out of the network's pod sets. Addresses, sets
// or a table that are not there are not an error: DEL may run twice, or
// after a failed ADD.
func (m *Masq) RemovePod(network string, addrs []netip.Addr) error {
	if len(addrs) == 0 {
		return nil
	}
	o := newMasqObjects(network)
	// Common case first: every element is there.
	if err := m.deleteElements(o, addrs, false); err == nil {
		return nil
	}
	// Something is missing. Without the sets there is nothing to remove;
	// with them, add-then-delete in one batch removes an element whether
	// or not it was there.
	if _, err := m.conn.GetSetByName(o.table, o.pods4.Name); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		return fmt.Errorf("nftables: look up %s: %w", o.pods4.Name, err)
	}
	if err := m.deleteElements(o, addrs, true); err != nil {
		return fmt.Errorf("nftables: remove %v from the masquerade of %s: %w", addrs, network, err)
	}
	return nil
}

// QueueRemoveOwned queues, without committing, the removal of owner's
// addresses from the network's pod sets. It removes only elements whose
// comment names owner: an address from a stale prevResult may since
// belong to another pod, whose entry must stay. candidates are the
// addresses owner may have (prevResult's): their elements are got by key,
// whatever the number of pods in the sets. Without candidates (no
// prevResult), or without elems, it lists the sets to find owner's. The
// caller commits the connection's batch; if that fails whole (an element
// went away in between), RemovePod is the tolerant way to finish.
func (m *Masq) QueueRemoveOwned(network string, owner tag.Owner, candidates []netip.Addr) error {
	addrs, err := m.ownedAmong(network, owner, candidates)
	if err != nil {
		return err
	}
	o := newMasqObjects(network)
	for _, a := range addrs {
		if err := m.conn.SetDeleteElements(o.podSet(a), []nftables.SetElement{{Key: a.AsSlice()}}); err != nil {
			return fmt.Errorf("nftables: queue the removal of %v from %s: %w", a, o.podSet(a).Name, err)
		}
	}
	return nil
}

// ownedAmong returns the candidates whose elements name owner; see
// QueueRemoveOwned.
func (m *Masq) ownedAmong(network string, owner tag.Owner, candidates []netip.Addr) ([]netip.Addr, error) {
	if len(candidates) == 0 || m.elems == nil {
		return m.OwnedBy(network, owner)
	}
	o := newMasqObjects(network)
	var addrs []netip.Addr
	var qs []nftelem.Query
	for _, a := range candidates {
		if a = a.Unmap(); a.IsValid() && !slices.Contains(addrs, a) {
			addrs = append(addrs, a)
			qs = append(qs, nftelem.Query{Set: o.podSet(a).Name, Key: a.AsSlice()})
		}
	}
	rs, err := m.elems.Get(o.table, qs)
	if errors.Is(err, nftelem.ErrUnsupported) {
		return m.OwnedBy(network, owner)
	}
	if err != nil {
		return nil, fmt.Errorf("nftables: %w", err)
	}
	var out []netip.Addr
	for i, r := range rs {
		if who, _ := tag.ParseComment(network, r.Element.Comment); r.State == nftelem.Found && who == owner {
			out = append(out, addrs[i])
		}
	}
	return out, nil
}

func (m *Masq) deleteElements(o *masqObjects, addrs []netip.Addr, addFirst bool) error {
	for _, a := range addrs {
		el := []nftables.SetElement{{Key: a.AsSlice()}}
		if addFirst {
			if err := m.conn.SetAddElements(o.podSet(a), el); err != nil {
				return err
			}
		}
		if err := m.conn.SetDeleteElements(o.podSet(a), el); err != nil {
			return err
		}
	}
	return m.conn.Flush()
}

// Members lists the network's pod addresses with their owners. A network
// without sets has none.
func (m *Masq) Members(network string) (map[netip.Addr]tag.Owner, error) {
	o := newMasqObjects(network)
	out := map[netip.Addr]tag.Owner{}
	for _, s := range []*nftables.Set{o.pods4, o.pods6} {
		if _, err := m.conn.GetSetByName(o.table, s.Name); err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue
			}
			return nil, fmt.Errorf("nftables: look up %s: %w", s.Name, err)
		}
		elems, err := m.conn.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("nftables: list %s: %w", s.Name, err)
		}
		for _, e := range elems {
			a, ok := netip.AddrFromSlice(e.Key)
			if !ok {
				continue
			}
			owner, _ := tag.ParseComment(network, e.Comment)
			out[a.Unmap()] = owner
		}
	}
	return out, nil
}

// OwnedBy lists the network's pod addresses whose elements name owner.
func (m *Masq) OwnedBy(network string, owner tag.Owner) ([]netip.Addr, error) {
	members, err := m.Members(network)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for a, who := range members {
		if who == owner {
			out = append(out, a)
		}
	}
	return out, nil
}

// RulesCurrent reports whether the network's masquerade rules are in
// place as this podnet writes them.
func (m *Masq) RulesCurrent(n MasqNetwork) (bool, error) {
	o := newMasqObjects(n.Network)
	chains, err := m.conn.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return false, fmt.Errorf("nftables: list chains: %w", err)
	}
	found := false
	for _, c := range chains {
		found = found || c.Table.Name == o.table.Name && c.Name == o.chain.Name
	}
	if !found {
		return false, nil
	}
	got, err := m.conn.GetRules(o.table, o.chain)
	if err != nil {
		return false, fmt.Errorf("nftables: list the rules of %s: %w", o.chain.Name, err)
	}
	return rulesCurrent(got, n), nil
}
