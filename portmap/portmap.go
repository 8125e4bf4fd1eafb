package portmap

import (
	"errors"
	"slices"
	"strings"

	"github.com/podnet/podnet/cni"
)

// Request is one attachment's ADD, DEL or CHECK.
type Request struct {
	Owner  Owner
	Config *Config
	// Prev is prevResult: the container's addresses and host-side
	// interfaces. ADD and CHECK need it when there are mappings; DEL
	// uses it only to skip the sets of a family the container lacks.
	Prev *cni.Result
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
	if r.Prev == nil {
		return nil, cni.Errorf(cni.CodeInvalidNetworkConfig,
			"config: prevResult is missing: podnet-portmap runs chained after the plugin that gives the container its addresses")
	}
	v4, v6 := PodIPs(r.Prev)
	return Want(r.Owner, r.Config, v4, v6)
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
// another attachment holds fails it with cni.CodeAddressConflict and
// changes nothing.
func Add(r *Request) error {
	if len(r.Config.Mappings) == 0 {
		return nil
	}
	want, err := r.want()
	if err != nil {
		return err
	}
	err = locked(r.lockPath(), func(n *NFT) error {
		existing, missing, err := n.List(setsFor(want))
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
	if r.Config.SNAT && slices.ContainsFunc(want, func(e Entry) bool { return e.Kind == KindSNAT && e.is4() }) {
		if err := EnableRouteLocalnet(HostInterfaces(r.Prev)); err != nil {
			return cni.Errorf(cni.CodeIOFailure, "%v", err)
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
func QueueDel(n *NFT, r *Request) (owned []Entry, err error) {
	if len(r.Config.Mappings) == 0 && !r.Sweep {
		return nil, nil
	}
	sets := AllSets
	if v4, v6 := PodIPs(r.Prev); v4.IsValid() != v6.IsValid() {
		sets = SetsOf(v4.IsValid())
	}
	existing, _, err := n.List(sets)
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
		return cni.Errorf(cni.CodeIOFailure, "%v", err)
	}
	return nil
}

// Check verifies that the table is whole and holds the request's
// elements.
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
		return cni.Errorf(cni.CodeInternal, "%v", err)
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
		return cni.Errorf(cni.CodeInternal, "portmap: table inet %s lacks %d element(s) of %s: %s", TableName, len(miss), r.Owner.ContainerID, strings.Join(s, "; "))
	}
	return nil
}

// GC removes the elements of network whose attachment is not in valid.
// When the table is left without any element, GC removes the table too,
// so a host without published ports has no podnet-portmap state at all.
func GC(network string, valid []Owner, lockPath string) error {
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
			n.conn.DelTable(n.rs.Table)
			if err := n.conn.Flush(); err != nil {
				return cni.Errorf(cni.CodeIOFailure, "portmap: delete table inet %s: %v", TableName, err)
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
// host (the flock on path, DefaultLockPath when ""), as a CNI error.
func Lock(path string) (unlock func(), err error) {
	if path == "" {
		path = DefaultLockPath
	}
	unlock, err = lock(path)
	if err != nil {
		return nil, cni.Errorf(cni.CodeIOFailure, "%v", err)
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
	var ce *cni.Error
	if err != nil && !errors.As(err, &ce) {
		err = cni.Errorf(cni.CodeIOFailure, "%v", err)
	}
	return err
}
