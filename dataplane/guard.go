package dataplane

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/tag"
)

// Guards programs the source guards (Guard) over netlink: the elements
// of a pod's interface in the guard table of its family, and the table
// itself, its base chain and its rules when they are not there yet.
//
// Several plugin processes run at once. The table, chain and sets are
// created without NLM_F_EXCL, so creating what exists is a no-op, and the
// rules are replaced by one batch (flush the chain, add them all): racing
// writers leave exactly one copy.
type Guards struct {
	conn *nftables.Conn
}

// NewGuards opens an nftables connection in the calling thread's network
// namespace.
func NewGuards() (*Guards, error) {
	c, err := nftables.New(nftables.AsLasting())
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	return &Guards{conn: c}, nil
}

// GuardsOn is a Guards on a connection the caller owns (and closes), so
// that its changes can share a batch with the caller's.
func GuardsOn(c *nftables.Conn) *Guards { return &Guards{conn: c} }

// Close releases the connection.
func (gs *Guards) Close() error { return gs.conn.CloseLasting() }

// Install adds g's elements in one batch; the interface is guarded from
// the commit on. The common case, the table in place, is a batch of
// elements alone; the first pod of a family also makes the table. It
// does not remove other elements of g's interface: Replace does, for an
// interface that may have been guarded before.
func (gs *Guards) Install(g Guard) error {
	if len(g.PodMAC) != 6 {
		return fmt.Errorf("source guard of %s: MAC %q is not a 6-byte Ethernet address", g.HostIf, g.PodMAC)
	}
	o := newGuardObjects(g.Bridged)
	elems := g.elements()
	err := gs.addBatch(o, elems, false)
	if err != nil {
		// The table needs declaring: not over a newer podnet's.
		var cerr error
		if o.found, cerr = nftlayout.Check(gs.conn, o.table, GuardLayout); cerr != nil {
			return fmt.Errorf("source guard of %s: %w", g.HostIf, cerr)
		}
	}
	for attempt := 0; err != nil && attempt < maxAttempts; attempt++ {
		if err = gs.addBatch(o, elems, true); err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("nftables: install the source guard of %s: %w", g.HostIf, err)
	}
	return nil
}

func (gs *Guards) addBatch(o *guardObjects, elems map[string][]nftables.SetElement, declare bool) error {
	if declare {
		gs.conn.AddTable(o.table)
		if err := nftlayout.Declare(gs.conn, o.table, GuardLayout, o.found); err != nil {
			return err
		}
		gs.conn.AddChain(o.chain)
		gs.conn.AddChain(o.drop)
		gs.conn.AddObj(o.limit)
		for _, name := range guardSetOrder {
			if err := gs.conn.AddSet(o.sets[name], nil); err != nil {
				return err
			}
		}
		gs.conn.FlushChain(o.chain)
		gs.conn.FlushChain(o.drop)
		for _, r := range o.dropRules() {
			gs.conn.AddRule(r)
		}
		for _, r := range o.rules() {
			gs.conn.AddRule(r)
		}
	}
	for _, name := range guardSetOrder {
		if len(elems[name]) == 0 {
			continue
		}
		if err := gs.conn.SetAddElements(o.sets[name], elems[name]); err != nil {
			return err
		}
	}
	return gs.conn.Flush()
}

// Replace makes g's elements the only ones of its interface: for a
// repeated ADD, whose addresses may differ from the first one's.
func (gs *Guards) Replace(g Guard) error {
	if err := gs.Remove(g.HostIf); err != nil {
		return err
	}
	return gs.Install(g)
}

// QueueRemove queues, without committing, the deletion of g's elements,
// all of which must be there: the batch fails whole otherwise, and
// Remove is the tolerant way to finish.
func (gs *Guards) QueueRemove(g Guard) error {
	o := newGuardObjects(g.Bridged)
	elems := g.elements()
	for _, name := range guardSetOrder {
		if len(elems[name]) == 0 {
			continue
		}
		if err := gs.conn.SetDeleteElements(o.sets[name], elems[name]); err != nil {
			return fmt.Errorf("nftables: queue the removal of the source guard of %s: %w", g.HostIf, err)
		}
	}
	return nil
}

// Remove deletes every element of hostIf, in both families, whatever
// they are. Elements, sets or tables that are not there are not an
// error: DEL may run twice, or after a failed ADD. It lists the sets,
// which costs a few milliseconds with many pods: DEL, knowing the
// addresses, uses QueueRemove first.
func (gs *Guards) Remove(hostIf string) error {
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err = gs.removeListed(hostIf); err == nil || !errors.Is(err, unix.ENOENT) {
			break
		}
		// An element went away between the listing and the batch.
	}
	if err != nil {
		return fmt.Errorf("nftables: remove the source guard of %s: %w", hostIf, err)
	}
	return nil
}

func (gs *Guards) removeListed(hostIf string) error {
	queued := false
	for _, bridged := range []bool{false, true} {
		elems, err := gs.listed(newGuardObjects(bridged), hostIf)
		if err != nil {
			return err
		}
		o := newGuardObjects(bridged)
		for _, name := range guardSetOrder {
			if len(elems[name]) == 0 {
				continue
			}
			if err := gs.conn.SetDeleteElements(o.sets[name], elems[name]); err != nil {
				return err
			}
			queued = true
		}
	}
	if !queued {
		return nil
	}
	return gs.conn.Flush()
}

// listed lists the elements of hostIf in o's sets (those of every
// interface when hostIf is empty), by set name. A table or set that is
// not there has none.
func (gs *Guards) listed(o *guardObjects, hostIf string) (map[string][]nftables.SetElement, error) {
	out := map[string][]nftables.SetElement{}
	var ifn []byte
	if hostIf != "" {
		ifn = ifnameKey(hostIf)
	}
	for _, name := range guardSetOrder {
		all, err := gs.conn.GetSetElements(o.sets[name])
		if listedNothing(err) {
			if name == guardSetPods {
				return out, nil // no table
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("list %s %s: %w", o.table.Name, name, err)
		}
		for _, e := range all {
			if e.IntervalEnd {
				continue // with KeyEnd, the kernel lists none; older ones may
			}
			if ifn == nil || bytes.HasPrefix(e.Key, ifn) {
				out[name] = append(out[name], e)
			}
		}
	}
	return out, nil
}

// Current reports whether g's interface is guarded by exactly g's
// elements, under the rules this podnet writes.
func (gs *Guards) Current(g Guard) (bool, error) {
	o := newGuardObjects(g.Bridged)
	rules, err := gs.conn.GetRules(o.table, o.chain)
	if listedNothing(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("nftables: list the rules of %s: %w", o.chain.Name, err)
	}
	if len(rules) != len(o.rules()) || string(rules[0].UserData) != guardRuleTag {
		return false, nil
	}
	got, err := gs.listed(o, g.HostIf)
	if err != nil {
		return false, fmt.Errorf("nftables: %w", err)
	}
	want := g.elements()
	for _, name := range guardSetOrder {
		if !sameElements(got[name], want[name], name == guardSetPods) {
			return false, nil
		}
	}
	return true, nil
}

// sameElements compares two lists of elements by key and key end (and
// comment, withComment), in any order.
func sameElements(a, b []nftables.SetElement, withComment bool) bool {
	if len(a) != len(b) {
		return false
	}
	for _, e := range a {
		if !slices.ContainsFunc(b, func(f nftables.SetElement) bool {
			return bytes.Equal(e.Key, f.Key) && bytes.Equal(e.KeyEnd, f.KeyEnd) && (!withComment || e.Comment == f.Comment)
		}) {
			return false
		}
	}
	return true
}

// Owners lists the guarded interfaces, in both families, with their
// owners as their elements name them. An element whose comment podnet
// did not write is listed with the zero Owner.
func (gs *Guards) Owners() (map[string]tag.Owner, error) {
	out := map[string]tag.Owner{}
	for _, bridged := range []bool{false, true} {
		elems, err := gs.listed(newGuardObjects(bridged), "")
		if err != nil {
			return nil, fmt.Errorf("nftables: %w", err)
		}
		for _, e := range elems[guardSetPods] {
			owner, _ := tag.ParseOwner(e.Comment)
			out[string(bytes.TrimRight(e.Key, "\x00"))] = owner
		}
	}
	return out, nil
}

// listedNothing reports whether a listing failed because its table,
// chain or set is not there. The library's listings format the netlink
// error into their own instead of wrapping it, so the errno is matched
// by its text as well.
func listedNothing(err error) bool {
	return err != nil && (errors.Is(err, unix.ENOENT) || strings.HasSuffix(err.Error(), unix.ENOENT.Error()))
}
