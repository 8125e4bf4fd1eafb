package portmap

import (
	"errors"
	"fmt"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftelem"
	"github.com/podnet/podnet/dataplane/nftlayout"
)

// NFT is the table in the kernel, reached over one netlink socket that
// lives as long as the NFT. It talks to the network namespace of the
// thread that called OpenNFT.
type NFT struct {
	conn *nftables.Conn
	// elems gets elements by key, on conn's socket; nil: sets are listed.
	elems *nftelem.Conn
	rs    *Ruleset
}

// OnConn is an NFT that queues its work on a connection the caller owns
// (and closes): host ports then go into the same batch as the caller's
// own changes, one commit for both. elems gets elements by key (on the
// same socket: nftelem.Lasting); nil makes the NFT list whole sets.
func OnConn(c *nftables.Conn, elems *nftelem.Conn) *NFT {
	return &NFT{conn: c, elems: elems, rs: NewRuleset()}
}

// OpenNFT opens a netlink socket to nftables in the caller's network
// namespace.
func OpenNFT() (*NFT, error) {
	c, elems, err := nftelem.Lasting()
	if err != nil {
		return nil, errorf(KindIO, "portmap: nftables netlink socket: %v", err)
	}
	return OnConn(c, elems), nil
}

// Close closes the socket.
func (n *NFT) Close() error { return n.conn.CloseLasting() }

// List reads the elements of the named sets. missing is true when one of
// them does not exist: the table has to be set up before elements can
// be added.
func (n *NFT) List(sets []string) (entries []Entry, missing bool, err error) {
	for _, name := range sets {
		set := n.rs.Sets[name]
		elems, err := n.conn.GetSetElements(set)
		if err != nil {
			// GetSetElements does not wrap the errno; this call does.
			if _, err2 := n.conn.GetSetByName(n.rs.Table, name); errors.Is(err2, unix.ENOENT) {
				missing = true
				continue
			}
			return nil, false, errorf(KindIO, "portmap: list elements of %s in table inet %s: %v", name, TableName, err)
		}
		for _, el := range elems {
			e, err := DecodeEntry(name, el.Key, el.Val, el.Comment)
			if err != nil {
				continue // not ours to interpret; never matches an owner
			}
			entries = append(entries, e)
		}
	}
	return entries, missing, nil
}

// Get reads the elements with the keys of es (their set and key; their
// data and owner do not matter), in one round trip, however many
// elements the sets hold. missing is true when one of those sets does
// not exist. It needs an NFT with elems.
func (n *NFT) Get(es []Entry) (found []Entry, missing bool, err error) {
	qs := make([]nftelem.Query, 0, len(es))
	for _, e := range es {
		qs = append(qs, nftelem.Query{Set: e.Set(), Key: e.Key()})
	}
	rs, err := n.elems.Get(n.rs.Table, qs)
	if err != nil {
		if errors.Is(err, nftelem.ErrUnsupported) {
			return nil, false, err
		}
		return nil, false, errorf(KindIO, "portmap: %v", err)
	}
	for i, r := range rs {
		switch r.State {
		case nftelem.NoSet:
			missing = true
		case nftelem.Found:
			e, err := DecodeEntry(qs[i].Set, r.Element.Key, r.Element.Data, r.Element.Comment)
			if err == nil { // else not ours to interpret, as in List
				found = append(found, e)
			}
		}
	}
	return found, missing, nil
}

// lookup reads the elements with the keys of keys, and the sets of list
// whole. Where elements cannot be got by key (no elems, or a kernel
// before 4.15), it lists the sets of fallback instead.
func (n *NFT) lookup(keys []Entry, list, fallback []string) (existing []Entry, missing bool, err error) {
	if n.elems == nil {
		return n.List(fallback)
	}
	got, missing, err := n.Get(keys)
	if errors.Is(err, nftelem.ErrUnsupported) {
		return n.List(fallback)
	}
	if err != nil {
		return nil, false, err
	}
	listed, missing2, err := n.List(list)
	if err != nil {
		return nil, false, err
	}
	return append(got, listed...), missing || missing2, nil
}

// Apply makes ch in one batch, atomically. With setup, the batch first
// creates the table, its sets and chains where they are missing and
// (re)writes the chains' rules; without it, the batch only changes
// elements and fails if the table is not there.
func (n *NFT) Apply(ch Changes, setup bool) error {
	if ch.Empty() && !setup {
		return nil
	}
	if setup {
		// Setup rewrites the chains: not a newer podnet's.
		found, err := nftlayout.Check(n.conn, n.rs.Table, Layout)
		if err != nil {
			return errorf(KindIO, "portmap: %w", err)
		}
		if err := n.queueSetup(found); err != nil {
			return err
		}
	}
	if err := n.queueElements(ch.Del, false, n.conn.SetDeleteElements); err != nil {
		return err
	}
	if err := n.queueElements(ch.Add, true, n.conn.SetAddElements); err != nil {
		return err
	}
	return n.Commit()
}

// Commit sends what is queued on the connection as one batch.
func (n *NFT) Commit() error {
	if err := n.conn.Flush(); err != nil {
		if errors.Is(err, unix.EEXIST) {
			// Reconcile saw no holder: one appeared since (a writer
			// that does not take the lock).
			return errorf(KindConflict, "portmap: a host port was taken by another container during this ADD: %v", err)
		}
		return errorf(KindIO, "portmap: update table inet %s: %v", TableName, err)
	}
	return nil
}

func (n *NFT) queueSetup(found uint32) error {
	rs := n.rs
	n.conn.AddTable(rs.Table)
	if err := nftlayout.Declare(n.conn, rs.Table, Layout, found); err != nil {
		return errorf(KindIO, "portmap: %w", err)
	}
	for _, name := range AllSets {
		// AddSet only fails for anonymous or constant sets.
		_ = n.conn.AddSet(rs.Sets[name], nil)
	}
	for _, c := range rs.Chains {
		n.conn.AddChain(c)
		n.conn.FlushChain(c)
		for _, r := range rs.Rules[c.Name] {
			n.conn.AddRule(r)
		}
	}
	return nil
}

// queueElements queues op on es, grouped by set. A deletion needs the
// key only.
func (n *NFT) queueElements(es []Entry, full bool, op func(*nftables.Set, []nftables.SetElement) error) error {
	bySet := map[string][]nftables.SetElement{}
	var order []string
	for _, e := range es {
		name := e.Set()
		if _, ok := bySet[name]; !ok {
			order = append(order, name)
		}
		el := nftables.SetElement{Key: e.Key()}
		if full {
			el.Val, el.Comment = e.Value(), e.Owner.String()
		}
		bySet[name] = append(bySet[name], el)
	}
	for _, name := range order {
		if err := op(n.rs.Sets[name], bySet[name]); err != nil {
			return fmt.Errorf("portmap: encode elements of %s: %w", name, err)
		}
	}
	return nil
}

// CheckRuleset verifies that every chain of the table exists with the
// number of rules podnet gives it.
func (n *NFT) CheckRuleset() error {
	for _, c := range n.rs.Chains {
		rules, err := n.conn.GetRules(n.rs.Table, c)
		if err != nil {
			return fmt.Errorf("portmap: chain %s of table inet %s: %v", c.Name, TableName, err)
		}
		if got, want := len(rules), len(n.rs.Rules[c.Name]); got != want {
			return fmt.Errorf("portmap: chain %s of table inet %s has %d rules, want %d", c.Name, TableName, got, want)
		}
	}
	return nil
}

// Ruleset returns the description of the table NFT programs.
func (n *NFT) Ruleset() *Ruleset { return n.rs }
