package dataplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/tag"
	"github.com/podnet/podnet/internal/flock"
)

// Closed keeps pods closed in the kernel until the node's policy agent
// admits them (docs/network-policy.md, "The first-packet guarantee"):
// CNI ADD closes a pod the agent could not answer for, the agent opens
// it once its rules are in place, DEL and GC remove what is left.
//
// A pod is closed by its addresses, one element each in a set of the
// table ClosedTableName, with the pod and its owner in the element's
// comment; the table's rules never change per pod. Add and Open hold
// the lock file for their whole read and write, so that the agent never
// opens an address that a plugin closed again for another pod after the
// agent read it; removing an attachment's own elements (DEL) needs no
// lock.
type Closed struct {
	conn     *nftables.Conn
	lockPath string
}

// closedLockTimeout bounds the wait for the lock: its holders keep it
// for one nftables batch.
const closedLockTimeout = 5 * time.Second

// NewClosed opens an nftables connection in the calling thread's network
// namespace, or in the one of the netnsFd option; lockPath is the lock
// file Add and Open hold (admitsock.ClosedLockPath of the policy
// socket).
func NewClosed(lockPath string, netnsFd int) (*Closed, error) {
	opts := []nftables.ConnOption{nftables.AsLasting()}
	if netnsFd != 0 {
		opts = append(opts, nftables.WithNetNSFd(netnsFd))
	}
	c, err := nftables.New(opts...)
	if err != nil {
		return nil, fmt.Errorf("open nftables netlink socket: %w", err)
	}
	return &Closed{conn: c, lockPath: lockPath}, nil
}

// ClosedOn is a Closed on a connection the caller owns, so that
// QueueRemoveOwned shares the caller's batch. It has no lock: Add and
// Open are not for it.
func ClosedOn(c *nftables.Conn) *Closed { return &Closed{conn: c} }

// Close releases the connection; the table stays.
func (c *Closed) Close() error { return c.conn.CloseLasting() }

func (c *Closed) lock(ctx context.Context) (*flock.Lock, error) {
	if c.lockPath == "" {
		return nil, errors.New("closed pods: no lock file")
	}
	return flock.Acquire(ctx, c.lockPath, closedLockTimeout)
}

// Add closes p: its addresses go in the closed sets, the table, its
// chains and rules made or made again in the same batch, so that the
// pod is closed whatever was there.
func (c *Closed) Add(ctx context.Context, p ClosedPod) error {
	if len(p.Addrs) == 0 {
		return nil
	}
	l, err := c.lock(ctx)
	if err != nil {
		return err
	}
	defer l.Release()
	o := newClosedObjects()
	// Fast path, when the table exists (made whole, sets and rules in
	// one batch, and only ever removed whole): a batch of elements. It
	// leaves no deferred work for the socket's close to wait for, as
	// re-declaring the chains would (see Masq.AddPod).
	if err := c.addElements(o, p); err == nil {
		return nil
	}
	found, err := nftlayout.Check(c.conn, o.table, ClosedLayout)
	if err != nil {
		return fmt.Errorf("close pod %s: %w", p.Pod, err)
	}
	c.conn.AddTable(o.table)
	if err := nftlayout.Declare(c.conn, o.table, ClosedLayout, found); err != nil {
		return err
	}
	for _, s := range []*nftables.Set{o.set4, o.set6} {
		if err := c.conn.AddSet(s, nil); err != nil {
			return fmt.Errorf("nftables: declare set %s: %w", s.Name, err)
		}
	}
	for _, ch := range o.chains {
		c.conn.AddChain(ch)
		c.conn.FlushChain(ch)
	}
	for _, r := range o.rules() {
		c.conn.AddRule(r)
	}
	if err := c.addElements(o, p); err != nil {
		return fmt.Errorf("nftables: close pod %s (%v) in table %s: %w", p.Pod, p.Addrs, ClosedTableName, err)
	}
	return nil
}

// addElements commits p's elements with whatever the batch holds.
func (c *Closed) addElements(o *closedObjects, p ClosedPod) error {
	for _, a := range p.Addrs {
		a = a.Unmap()
		if err := c.conn.SetAddElements(o.set(a), []nftables.SetElement{{Key: a.AsSlice(), Comment: p.comment()}}); err != nil {
			return err
		}
	}
	return c.conn.Flush()
}

// List returns the closed pods, one per pod and owner, addresses
// sorted. No table: none.
func (c *Closed) List() ([]ClosedPod, error) {
	o := newClosedObjects()
	type key struct {
		pod   string
		owner tag.Owner
	}
	byKey := map[key]*ClosedPod{}
	var order []key
	// The library loses ENOENT's identity in a listing's error; a
	// lookup keeps it. Both sets are made in one batch, so one lookup
	// tells whether there is a table to list.
	if _, err := c.conn.GetSetByName(o.table, o.set4.Name); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		return nil, fmt.Errorf("nftables: look up %s of %s: %w", o.set4.Name, ClosedTableName, err)
	}
	for _, s := range []*nftables.Set{o.set4, o.set6} {
		elems, err := c.conn.GetSetElements(s)
		if err != nil {
			return nil, fmt.Errorf("nftables: list %s of %s: %w", s.Name, ClosedTableName, err)
		}
		for _, e := range elems {
			a, ok := netip.AddrFromSlice(e.Key)
			pod, owner, okc := parseClosedComment(e.Comment)
			if !ok || !okc {
				// Not written by podnet: it closes an address all the
				// same, and is listed under no pod.
				pod, owner = "", tag.Owner{}
			}
			k := key{pod, owner}
			cp := byKey[k]
			if cp == nil {
				cp = &ClosedPod{Pod: pod, Owner: owner}
				byKey[k] = cp
				order = append(order, k)
			}
			if ok {
				cp.Addrs = append(cp.Addrs, a.Unmap())
			}
		}
	}
	out := make([]ClosedPod, 0, len(order))
	for _, k := range order {
		p := byKey[k]
		slices.SortFunc(p.Addrs, netip.Addr.Compare)
		out = append(out, *p)
	}
	return out, nil
}

// Open removes p's elements that still name p's pod and owner: an
// address closed again since for another attachment stays closed. It
// reports whether it removed anything.
func (c *Closed) Open(ctx context.Context, p ClosedPod) (bool, error) {
	l, err := c.lock(ctx)
	if err != nil {
		return false, err
	}
	defer l.Release()
	have, err := c.List()
	if err != nil {
		return false, err
	}
	var del []netip.Addr
	for _, h := range have {
		if h.Pod == p.Pod && h.Owner == p.Owner {
			for _, a := range h.Addrs {
				if slices.Contains(p.Addrs, a) {
					del = append(del, a)
				}
			}
		}
	}
	if len(del) == 0 {
		return false, nil
	}
	if err := c.queueDelete(del); err != nil {
		return false, err
	}
	if err := c.conn.Flush(); err != nil {
		return false, fmt.Errorf("nftables: open pod %s (%v) in table %s: %w", p.Pod, del, ClosedTableName, err)
	}
	return true, nil
}

func (c *Closed) queueDelete(addrs []netip.Addr) error {
	o := newClosedObjects()
	for _, a := range addrs {
		if err := c.conn.SetDeleteElements(o.set(a), []nftables.SetElement{{Key: a.AsSlice()}}); err != nil {
			return fmt.Errorf("nftables: queue the removal of %s from %s: %w", a, ClosedTableName, err)
		}
	}
	return nil
}

// OwnedBy lists the closed addresses whose elements name owner.
func (c *Closed) OwnedBy(owner tag.Owner) ([]netip.Addr, error) {
	all, err := c.List()
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, p := range all {
		if p.Owner == owner {
			out = append(out, p.Addrs...)
		}
	}
	return out, nil
}

// QueueRemoveOwned queues, without committing, the removal of owner's
// closed addresses: found by the elements' comments, so that an address
// closed for another attachment stays. The caller commits; a batch that
// fails whole (an element went away in between) is finished with
// RemoveOwned.
func (c *Closed) QueueRemoveOwned(owner tag.Owner) error {
	addrs, err := c.OwnedBy(owner)
	if err != nil {
		return err
	}
	return c.queueDelete(addrs)
}

// RemoveOwned removes owner's closed addresses. Nothing closed, or no
// table, is not an error: DEL may run twice.
func (c *Closed) RemoveOwned(owner tag.Owner) error {
	addrs, err := c.OwnedBy(owner)
	if err != nil || len(addrs) == 0 {
		return err
	}
	if err := c.queueDelete(addrs); err != nil {
		return err
	}
	if err := c.conn.Flush(); err == nil || !errors.Is(err, unix.ENOENT) {
		if err != nil {
			return fmt.Errorf("nftables: remove the closed addresses %v of %s: %w", addrs, owner, err)
		}
		return nil
	}
	// One went away since the listing (the agent opened it): a batch
	// each, the missing ones skipped.
	for _, a := range addrs {
		if err := c.queueDelete([]netip.Addr{a}); err != nil {
			return err
		}
		if err := c.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("nftables: remove the closed address %s of %s: %w", a, owner, err)
		}
	}
	return nil
}

// RemoveTable deletes the table and every closed pod in it: for an agent
// that no longer enforces policy, which would never open them. No table
// is not an error; a table of a newer podnet's layout is left, with a
// *nftlayout.NewerError.
func (c *Closed) RemoveTable() error {
	t := newClosedObjects().table
	if _, err := nftlayout.Check(c.conn, t, ClosedLayout); err != nil {
		return err
	}
	c.conn.AddTable(t)
	c.conn.DelTable(t)
	if err := c.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: remove table %s: %w", ClosedTableName, err)
	}
	return nil
}
