package dataplane

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/google/nftables"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane/tag"
)

// Guards programs the source guards (Guard) over netlink.
//
// A guard's chain is named after its host interface and hooked to it by
// name. Kernels before 6.16 delete such a chain with its device; later
// ones keep it, unhooked, until a device of that name comes back. DEL
// and GC therefore remove chains explicitly and tolerate their absence,
// and an ADD always rewrites the chain's rules.
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

// Install creates or replaces g's chain and rules in one batch: the
// interface is guarded by the complete rule set from the moment the
// chain is hooked, never by part of it. The host interface must exist.
func (gs *Guards) Install(g Guard) error {
	if len(g.PodMAC) != 6 {
		return fmt.Errorf("source guard of %s: MAC %q is not a 6-byte Ethernet address", g.HostIf, g.PodMAC)
	}
	var err error
	for attempt := 0; attempt < maxAttempts; attempt++ {
		if err = gs.installBatch(g); err == nil || !retryable(err) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("nftables: install the source guard of %s: %w", g.HostIf, err)
	}
	return nil
}

func (gs *Guards) installBatch(g Guard) error {
	o := newGuardObjects(g.HostIf)
	gs.conn.AddTable(o.table)
	gs.conn.AddChain(o.chain)
	gs.conn.FlushChain(o.chain)
	sets, elems, rules := g.rules(o)
	for i, s := range sets {
		if err := gs.conn.AddSet(s, elems[i]); err != nil {
			return err
		}
	}
	for _, r := range rules {
		gs.conn.AddRule(r)
	}
	return gs.conn.Flush()
}

// QueueRemove queues, without committing, the deletion of hostIf's
// guard. The batch fails whole if the chain is not there; Remove is the
// tolerant way to finish.
func (gs *Guards) QueueRemove(hostIf string) {
	gs.conn.DelChain(newGuardObjects(hostIf).chain)
}

// Remove deletes hostIf's guard. A chain or table that is not there is
// not an error: DEL may run twice, after a failed ADD, or after the
// kernel removed the chain with its device.
func (gs *Guards) Remove(hostIf string) error {
	gs.QueueRemove(hostIf)
	if err := gs.conn.Flush(); err != nil && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("nftables: remove the source guard of %s: %w", hostIf, err)
	}
	return nil
}

// Current reports whether g's chain is in place, hooked to its
// interface, with the rules this podnet writes for g.
func (gs *Guards) Current(g Guard) (bool, error) {
	o := newGuardObjects(g.HostIf)
	// By listing: ListChain's error for a missing chain does not unwrap
	// to ENOENT.
	chains, err := gs.conn.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return false, fmt.Errorf("nftables: list netdev chains: %w", err)
	}
	if !slices.ContainsFunc(chains, func(c *nftables.Chain) bool {
		return c.Table.Name == o.table.Name && c.Name == o.chain.Name && (c.Device == "" || c.Device == g.HostIf)
	}) {
		return false, nil
	}
	rules, err := gs.conn.GetRules(o.table, o.chain)
	if err != nil {
		return false, fmt.Errorf("nftables: list the rules of %s: %w", o.chain.Name, err)
	}
	_, _, want := g.rules(o)
	if len(rules) != len(want) {
		return false, nil
	}
	owner, digest, ok := parseGuardTag(rules[0].UserData)
	return ok && owner == g.Owner && digest == g.digest(), nil
}

// Owners lists the guards by host interface with their owners, as their
// first rules name them. A chain whose rules podnet did not write is
// listed with the zero Owner.
func (gs *Guards) Owners() (map[string]tag.Owner, error) {
	chains, err := gs.conn.ListChainsOfTableFamily(nftables.TableFamilyNetdev)
	if err != nil {
		return nil, fmt.Errorf("nftables: list netdev chains: %w", err)
	}
	out := map[string]tag.Owner{}
	for _, c := range chains {
		hostIf, ok := strings.CutPrefix(c.Name, "guard-")
		if c.Table.Name != GuardTableName || !ok {
			continue
		}
		rules, err := gs.conn.GetRules(c.Table, c)
		if err != nil {
			if errors.Is(err, unix.ENOENT) {
				continue // removed meanwhile
			}
			return nil, fmt.Errorf("nftables: list the rules of %s: %w", c.Name, err)
		}
		var owner tag.Owner
		if len(rules) > 0 {
			owner, _, _ = parseGuardTag(rules[0].UserData)
		}
		out[hostIf] = owner
	}
	return out, nil
}
