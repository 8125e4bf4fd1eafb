package portmap

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"testing"

	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/netns"
)

// TestGetByKey: every map and set of the table gives its elements back
// by key, owner and data included (the keys as Entry.Key lays out the
// concatenations are the kernel's), a missing table says missing, and
// Add and Del by key leave another owner's element alone.
func TestGetByKey(t *testing.T) {
	testutil.RequireRoot(t)
	_, node := testutil.NewNodeNetNS(t)
	host6 := netip.MustParseAddr("fd18::1")
	es := []Entry{
		{Kind: DNAT, Proto: TCP, HostPort: 80, PodIP: podA, PodPort: 8080, Owner: ownerA},
		{Kind: DNAT, Proto: UDP, HostIP: host, HostPort: 53, PodIP: podA, PodPort: 5353, Owner: ownerA},
		{Kind: SNAT, PodIP: podA, Owner: ownerA},
		{Kind: DNAT, Proto: TCP, HostPort: 80, PodIP: podA6, PodPort: 8080, Owner: ownerA},
		{Kind: DNAT, Proto: SCTP, HostIP: host6, HostPort: 9, PodIP: podA6, PodPort: 99, Owner: ownerA},
		{Kind: SNAT, PodIP: podA6, Owner: ownerA},
	}
	lock := t.TempDir() + "/lock"
	err := netns.Do(node, func() error {
		n, err := OpenNFT()
		if err != nil {
			return err
		}
		defer n.Close()
		if got, missing, err := n.Get(es); err != nil || !missing || len(got) != 0 {
			return fmt.Errorf("before the table: %v, missing %v, %v", got, missing, err)
		}
		if err := n.Apply(Changes{Add: es}, true); err != nil {
			return err
		}
		defer func() { n.conn.DelTable(n.rs.Table); _ = n.conn.Flush() }()
		other := Entry{Kind: DNAT, Proto: TCP, HostPort: 81, PodIP: podA, PodPort: 8080}
		got, missing, err := n.Get(append(slices.Clone(es), other))
		if err != nil || missing {
			return fmt.Errorf("get: missing %v, %v", missing, err)
		}
		if fmt.Sprint(got) != fmt.Sprint(es) {
			return fmt.Errorf("got\n%v\nwant\n%v", got, es)
		}
		return addDelByKey(n, lock)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// addDelByKey: B's ADD of A's port is refused and its DEL takes nothing
// of A's; A's DEL by key takes all of A's.
func addDelByKey(n *NFT, lock string) error {
	c := &Config{SNAT: true, Mappings: []Mapping{{Proto: TCP, HostPort: 80, ContainerPort: 8080}}}
	reqA := &Request{Owner: ownerA, Config: c, Container: &Container{V4: podA, V6: podA6}, LockPath: lock}
	reqB := &Request{Owner: ownerB, Config: c, Container: &Container{V4: podB}, LockPath: lock}
	if err := Add(reqB); !errors.Is(err, &Error{Kind: KindConflict}) {
		return fmt.Errorf("B's ADD of A's port: %v", err)
	}
	if err := Del(reqB); err != nil {
		return err
	}
	got, _, err := n.List(AllSets)
	if err != nil || len(Owned(ownerA, got)) != 6 {
		return fmt.Errorf("after B's DEL, A has %v (%v)", Owned(ownerA, got), err)
	}
	if err := Del(reqA); err != nil {
		return err
	}
	got, _, err = n.List(AllSets)
	if err != nil || len(Owned(ownerA, got)) != 2 {
		// The hostIP mappings were not in reqA: a DEL by key leaves them.
		return fmt.Errorf("after A's DEL, A has %v (%v), want its two hostIP mappings", Owned(ownerA, got), err)
	}
	return nil
}
