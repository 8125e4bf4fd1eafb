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
	if err := FlushUDP(UDPPorts(want)); err != nil {
		return cni.Errorf(cni.CodeIOFailure, "%v", err)
	}
	return nil
}

// Del removes the elements the request's owner has, and nothing else;
// it succeeds when there are none (or no table). Without mappings (the
// runtime sends DEL the configuration ADD had) there is nothing to do.
func Del(r *Request) error {
	if len(r.Config.Mappings) == 0 && !r.Sweep {
		return nil
	}
	sets := AllSets
	if v4, v6 := PodIPs(r.Prev); v4.IsValid() != v6.IsValid() {
		sets = SetsOf(v4.IsValid())
	}
	var owned []Entry
	err := locked(r.lockPath(), func(n *NFT) error {
		existing, _, err := n.List(sets)
		if err != nil {
			return err
		}
		owned = Owned(r.Owner, existing)
		return n.Apply(Changes{Del: owned}, false)
	})
	if err != nil {
		return err
	}
	if err := FlushUDP(UDPPorts(owned)); err != nil {
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
	if err := FlushUDP(UDPPorts(gone)); err != nil {
		return cni.Errorf(cni.CodeIOFailure, "%v", err)
	}
	return nil
}

// locked runs fn with the lock held and a socket open.
func locked(path string, fn func(*NFT) error) error {
	unlock, err := lock(path)
	if err != nil {
		return cni.Errorf(cni.CodeIOFailure, "%v", err)
	}
	defer unlock()
	n, err := OpenNFT()
	if err != nil {
		return err
	}
	defer n.Close()
	err = fn(n)
	var ce *cni.Error
	if err != nil && !errors.As(err, &ce) {
		err = cni.Errorf(cni.CodeIOFailure, "%v", err)
	}
	return err
}
