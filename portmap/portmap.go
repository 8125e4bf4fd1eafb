package portmap

import (
	"net/netip"
	"slices"
	"strings"

	"github.com/podnet/podnet/dataplane/nftlayout"
	"github.com/podnet/podnet/dataplane/tag"
)

// Container is where an attachment's mappings lead. A CNI plugin reads
// it from prevResult (portmapcni.Container).
type Container struct {
	// V4 and V6 are the container's addresses, the first of each family;
	// either may be the zero Addr.
	V4, V6 netip.Addr
	// HostInterfaces are the host side of the container's link, where
	// traffic to the container leaves the host.
	HostInterfaces []string
}

// Request is one attachment's ADD, DEL or CHECK.
type Request struct {
	Owner  tag.Owner
	Config *Config
	// Container is nil when it is not known (no prevResult). ADD and
	// CHECK need it when there are mappings; DEL uses it only to skip the
	// sets of a family the container lacks.
	Container *Container
	// LockPath is the lock file; "" means DefaultLockPath.
	LockPath string
	// Sweep makes Del look for the owner's elements even without
	// mappings: for a DEL whose mappings could not be read.
	Sweep bool
}

func (r *Request) lockPath() string {
	if r.LockPath == "" {
		return DefaultLockPath
	}
	return r.LockPath
}

func (r *Request) want() ([]Entry, error) {
	if r.Container == nil {
		return nil, errorf(KindInvalid,
			"config: prevResult is missing: podnet-portmap runs chained after the plugin that gives the container its addresses")
	}
	return Want(r.Owner, r.Config, r.Container.V4, r.Container.V6)
}

// delKeys are the elements a DEL looks up by key: those ADD made for
// the same mappings and container (the runtime gives DEL the
// configuration and prevResult of ADD), with the SNAT ones whatever the
// configuration says now (two more keys, and no element of the owner's
// is left should it have changed). nil when they cannot be derived: a
// sweep, no prevResult, or mappings that do not fit its addresses.
func (r *Request) delKeys() []Entry {
	if r.Sweep || r.Container == nil {
		return nil
	}
	c := *r.Config
	c.SNAT = true
	keys, err := Want(r.Owner, &c, r.Container.V4, r.Container.V6)
	if err != nil {
		return nil
	}
	return keys
}

// setsFor lists the sets of the families es touch.
func setsFor(es []Entry) []string {
	var has4, has6 bool
	for _, e := range es {
		has4, has6 = has4 || e.is4(), has6 || !e.is4()
	}
	var out []string
	if has4 {
		out = append(out, SetsOf(true)...)
	}
	if has6 {
		out = append(out, SetsOf(false)...)
	}
	return out
}

// Add publishes the request's mappings: one batch of element changes
// (plus the table, the first time), then a flush of the UDP mapped
// ports' conntrack entries. Repeating it is harmless; a host port that
// another attachment holds fails it (KindConflict) and changes nothing.
func Add(r *Request) error {
	if len(r.Config.Mappings) == 0 {
		return nil
	}
	want, err := r.want()
	if err != nil {
		return err
	}
	err = locked(r.lockPath(), func(n *NFT) error {
		// By key, not by listing every container's elements: see
		// AddLookups for what that reads, and what it leaves.
		keys, list := AddLookups(want)
		existing, missing, err := n.lookup(keys, list, setsFor(want))
		if err != nil {
			return err
		}
		ch, err := Reconcile(r.Owner, want, existing)
		if err != nil {
			return err
		}
		return n.Apply(ch, missing)
	})
	if err != nil {
		return err
	}
	// After the table exists: its input chain guards what route_localnet
	// opens.
	if r.Config.SNAT && slices.ContainsFunc(want, func(e Entry) bool { return e.Kind == SNAT && e.is4() }) {
		if err := EnableRouteLocalnet(r.Container.HostInterfaces); err != nil {
			return errorf(KindIO, "%v", err)
		}
	}
	return FlushUDPOf(want)
}

// Del removes the elements the request's owner has, and nothing else;
// it succeeds when there are none (or no table). Without mappings (the
// runtime sends DEL the configuration ADD had) there is nothing to do.
func Del(r *Request) error {
	if len(r.Config.Mappings) == 0 && !r.Sweep {
		return nil
	}
	var owned []Entry
	err := locked(r.lockPath(), func(n *NFT) error {
		var err error
		if owned, err = QueueDel(n, r); err != nil {
			return err
		}
		return n.Commit()
	})
	if err != nil {
		return err
	}
	return FlushUDPOf(owned)
}

// QueueDel is Del without the commit: it queues on n the removal of the
// elements the request's owner has and returns them. The caller holds
// Lock(r.LockPath) from before QueueDel until its Commit, and calls
// FlushUDPOf(owned) once the batch is in.
//
// When the request's mappings and container addresses say which keys ADD
// wrote (delKeys), it gets those elements by key; otherwise (a sweep, no
// prevResult) it lists the sets. Either way it removes only the
// elements whose comment names the owner: a key from a stale prevResult
// may since be another container's.
func QueueDel(n *NFT, r *Request) (owned []Entry, err error) {
	if len(r.Config.Mappings) == 0 && !r.Sweep {
		return nil, nil
	}
	sets := AllSets
	if c := r.Container; c != nil && c.V4.IsValid() != c.V6.IsValid() {
		sets = SetsOf(c.V4.IsValid())
	}
	var existing []Entry
	if keys := r.delKeys(); keys != nil {
		existing, _, err = n.lookup(keys, nil, sets)
	} else {
		existing, _, err = n.List(sets)
	}
	if err != nil {
		return nil, err
	}
	owned = Owned(r.Owner, existing)
	if err := n.queueElements(owned, false, n.conn.SetDeleteElements); err != nil {
		return nil, err
	}
	return owned, nil
}

// FlushUDPOf drops the conntrack entries of the UDP host ports among es,
// so that a flow a removed or new mapping changes does not go on through
// an old entry.
func FlushUDPOf(es []Entry) error {
	if err := FlushUDP(UDPPorts(es)); err != nil {
		return errorf(KindIO, "%v", err)
	}
	return nil
}

// Check verifies that the table is whole and holds the request's
// elements; an error of KindMissing says what is not.
func Check(r *Request) error {
	if len(r.Config.Mappings) == 0 {
		return nil
	}
	want, err := r.want()
	if err != nil {
		return err
	}
	n, err := OpenNFT()
	if err != nil {
		return err
	}
	defer n.Close()
	if err := n.CheckRuleset(); err != nil {
		return errorf(KindMissing, "%v", err)
	}
	existing, _, err := n.List(setsFor(want))
	if err != nil {
		return err
	}
	if miss := Missing(want, existing); len(miss) > 0 {
		var s []string
		for _, e := range miss {
			s = append(s, e.String())
		}
		return errorf(KindMissing, "portmap: table inet %s lacks %d element(s) of %s: %s", TableName, len(miss), r.Owner.ContainerID, strings.Join(s, "; "))
	}
	return nil
}

// GC removes the elements of network whose attachment is not in valid.
// When the table is left without any element, GC removes the table too,
// so a host without published ports has no podnet-portmap state at all.
func GC(network string, valid []tag.Owner, lockPath string) error {
	if lockPath == "" {
		lockPath = DefaultLockPath
	}
	var gone []Entry
	err := locked(lockPath, func(n *NFT) error {
		existing, missing, err := n.List(AllSets)
		if err != nil {
			return err
		}
		if missing && len(existing) == 0 {
			return nil
		}
		gone = Collect(network, valid, existing)
		if len(gone) == len(existing) {
			if _, err := nftlayout.Check(n.conn, n.rs.Table, Layout); err != nil {
				return errorf(KindIO, "portmap: %w", err)
			}
			n.conn.DelTable(n.rs.Table)
			if err := n.conn.Flush(); err != nil {
				return errorf(KindIO, "portmap: delete table inet %s: %v", TableName, err)
			}
			return nil
		}
		return n.Apply(Changes{Del: gone}, false)
	})
	if err != nil {
		return err
	}
	return FlushUDPOf(gone)
}

// Lock takes the lock that serialises the writers of the table on this
// host (the flock on path, DefaultLockPath when "").
func Lock(path string) (unlock func(), err error) {
	if path == "" {
		path = DefaultLockPath
	}
	unlock, err = lock(path)
	if err != nil {
		return nil, errorf(KindIO, "%v", err)
	}
	return unlock, nil
}

// locked runs fn with the lock held and a socket open. The socket is
// closed after the lock is released: closing an nftables socket waits
// for the kernel to finish the deferred work of the batches before it (a
// synchronize_rcu after a deletion), and the next writer need not wait
// for that.
func locked(path string, fn func(*NFT) error) error {
	unlock, err := Lock(path)
	if err != nil {
		return err
	}
	n, err := OpenNFT()
	if err != nil {
		unlock()
		return err
	}
	err = fn(n)
	unlock()
	n.Close()
	return err
}
