package portmap

import (
	"bytes"
	"fmt"
	"net/netip"

	"github.com/podnet/podnet/dataplane/tag"
)

// Want returns the entries an attachment should have: for each mapping,
// one DNAT entry per container address family it applies to, and with
// SNAT one SNAT entry per family that has a mapping. v4 and v6 are the
// container's addresses (either may be the zero Addr).
func Want(owner tag.Owner, c *Config, v4, v6 netip.Addr) ([]Entry, error) {
	if len(c.Mappings) == 0 {
		return nil, nil
	}
	if !v4.IsValid() && !v6.IsValid() {
		return nil, errorf(KindInvalid, "config: prevResult: no container address to map ports to")
	}
	var out []Entry
	var fam4, fam6 bool
	for i, m := range c.Mappings {
		n := 0
		for _, pod := range []netip.Addr{v4, v6} {
			if !pod.IsValid() || !m.Applies(pod.Is4()) {
				continue
			}
			e := Entry{Kind: DNAT, Proto: m.Proto, HostPort: m.HostPort, PodIP: pod, PodPort: m.ContainerPort, Owner: owner}
			if !m.Any() {
				e.HostIP = m.HostIP
			}
			out = append(out, e)
			fam4, fam6 = fam4 || pod.Is4(), fam6 || pod.Is6()
			n++
		}
		if n == 0 {
			return nil, errorf(KindInvalid,
				"config: runtimeConfig.portMappings[%d].hostIP: %s is IPv%s but the container has no IPv%s address", i, m.HostIP, family(m.HostIP), family(m.HostIP))
		}
	}
	if c.SNAT {
		if fam4 {
			out = append(out, Entry{Kind: SNAT, PodIP: v4, Owner: owner})
		}
		if fam6 {
			out = append(out, Entry{Kind: SNAT, PodIP: v6, Owner: owner})
		}
	}
	return out, nil
}

func family(a netip.Addr) string {
	if a.Is4() {
		return "4"
	}
	return "6"
}

// Changes is what one batch must do.
type Changes struct {
	Del []Entry
	Add []Entry
}

// Empty reports whether there is nothing to do.
func (c Changes) Empty() bool { return len(c.Del) == 0 && len(c.Add) == 0 }

// Reconcile works out how to bring owner's elements from existing (what
// the table holds, in the sets that want can touch) to want.
//
// An element with want's key that belongs to another owner is a
// conflict, unless it leads to the same container address and port:
// then that owner is gone (its address was given to this container) and
// the element is taken over. A host port is also taken when another
// owner maps it for the same protocol with a specific host address and
// this mapping is for any address, or the other way round.
//
// Elements owner has but want does not (an ADD repeated with fewer
// mappings) are removed.
func Reconcile(owner tag.Owner, want, existing []Entry) (Changes, error) {
	type key struct{ set, key string }
	type port struct {
		is4   bool
		proto Protocol
		port  uint16
	}
	byKey := make(map[key]Entry, len(existing))
	byPort := make(map[port][]Entry)
	for _, x := range existing {
		byKey[key{x.Set(), string(x.Key())}] = x
		if x.Kind == DNAT {
			p := port{x.is4(), x.Proto, x.HostPort}
			byPort[p] = append(byPort[p], x)
		}
	}

	var ch Changes
	deleted := map[key]bool{}
	del := func(x Entry) {
		k := key{x.Set(), string(x.Key())}
		if !deleted[k] {
			deleted[k] = true
			ch.Del = append(ch.Del, x)
		}
	}
	wanted := map[key]bool{}
	for _, w := range want {
		k := key{w.Set(), string(w.Key())}
		wanted[k] = true
		x, found := byKey[k]
		switch {
		case !found:
			ch.Add = append(ch.Add, w)
		case bytes.Equal(x.Value(), w.Value()) && x.Owner == owner:
			// already there
		case bytes.Equal(x.Value(), w.Value()) || x.Owner == owner:
			del(x)
			ch.Add = append(ch.Add, w)
		default:
			return Changes{}, conflict(w, x)
		}
		if w.Kind != DNAT {
			continue
		}
		for _, x := range byPort[port{w.is4(), w.Proto, w.HostPort}] {
			if x.Set() == w.Set() || x.Owner == owner {
				continue
			}
			if x.PodIP == w.PodIP {
				del(x) // a former holder of this container's address
				continue
			}
			if !w.HostIP.IsValid() || !x.HostIP.IsValid() {
				return Changes{}, conflict(w, x)
			}
		}
	}
	for _, x := range existing {
		if x.Owner == owner && !wanted[key{x.Set(), string(x.Key())}] {
			del(x)
		}
	}
	return ch, nil
}

func conflict(w, x Entry) error {
	host := func(e Entry) string {
		if e.HostIP.IsValid() {
			return "host address " + e.HostIP.String()
		}
		return "any host address"
	}
	if w.Kind == SNAT {
		return errorf(KindConflict, "container address %s is already in use by container %s (network %s, interface %s)",
			w.PodIP, x.Owner.ContainerID, x.Owner.Network, x.Owner.IfName)
	}
	owner := "an element podnet did not write"
	if x.Owner != (tag.Owner{}) {
		owner = fmt.Sprintf("container %s (network %s, interface %s)", x.Owner.ContainerID, x.Owner.Network, x.Owner.IfName)
	}
	return errorf(KindConflict, "host port %s/%d on %s is already taken: %s maps it on %s to %s",
		w.Proto, w.HostPort, host(w), owner, host(x), netip.AddrPortFrom(x.PodIP, x.PodPort))
}

// AddLookups says what ADD reads of the table so that Reconcile, given
// only that, decides as it would given every element: the keys of want;
// for a mapping on one host address, the any-address element of the same
// port (its key is the port's, in dnat4 or dnat6); and for a mapping on
// any address, the whole hostip map of its family (list), since another
// container's mapping of the same port on any one host address conflicts
// with it, and that address is part of the key. Nodes rarely have
// hostIP mappings, so that map is small or empty. Keys of a listed map
// are not looked up again.
//
// Elements the owner has under keys want no longer has (an ADD repeated
// with other mappings) are not read, so Reconcile does not remove them:
// runtimes DEL before they ADD again, a failed ADD undoes its own, and
// GC sweeps what a lost DEL leaves.
func AddLookups(want []Entry) (keys []Entry, list []string) {
	listed := map[string]bool{}
	for _, w := range want {
		if w.Kind == DNAT && !w.HostIP.IsValid() {
			s := SetHostIP6
			if w.is4() {
				s = SetHostIP4
			}
			if !listed[s] {
				listed[s] = true
				list = append(list, s)
			}
		}
	}
	seen := map[string]bool{}
	look := func(e Entry) {
		k := e.Set() + "\x00" + string(e.Key())
		if !listed[e.Set()] && !seen[k] {
			seen[k] = true
			keys = append(keys, e)
		}
	}
	for _, w := range want {
		look(w)
		if w.Kind == DNAT && w.HostIP.IsValid() {
			onAny := w
			onAny.HostIP = netip.Addr{}
			look(onAny)
		}
	}
	return keys, list
}

// Owned returns the entries of existing that belong to owner.
func Owned(owner tag.Owner, existing []Entry) []Entry {
	var out []Entry
	for _, x := range existing {
		if x.Owner == owner {
			out = append(out, x)
		}
	}
	return out
}

// Collect returns the entries of network's attachments that are not in
// valid: what GC removes. Elements whose comment podnet did not write,
// and those of other networks, are left alone.
func Collect(network string, valid []tag.Owner, existing []Entry) []Entry {
	keep := make(map[tag.Owner]bool, len(valid))
	for _, o := range valid {
		keep[o] = true
	}
	var out []Entry
	for _, x := range existing {
		if x.Owner.Network == network && !keep[x.Owner] {
			out = append(out, x)
		}
	}
	return out
}

// Missing returns the entries of want that existing does not hold with
// the same data and owner: what CHECK reports.
func Missing(want, existing []Entry) []Entry {
	type key struct{ set, key string }
	have := make(map[key]Entry, len(existing))
	for _, x := range existing {
		have[key{x.Set(), string(x.Key())}] = x
	}
	var out []Entry
	for _, w := range want {
		x, ok := have[key{w.Set(), string(w.Key())}]
		if !ok || x.Owner != w.Owner || !bytes.Equal(x.Value(), w.Value()) {
			out = append(out, w)
		}
	}
	return out
}

// UDPPorts returns the host ports of the UDP DNAT entries, by family:
// the conntrack entries to flush.
func UDPPorts(es []Entry) (v4, v6 []uint16) {
	for _, e := range es {
		if e.Kind != DNAT || e.Proto != UDP {
			continue
		}
		if e.is4() {
			v4 = append(v4, e.HostPort)
		} else {
			v6 = append(v6, e.HostPort)
		}
	}
	return v4, v6
}
