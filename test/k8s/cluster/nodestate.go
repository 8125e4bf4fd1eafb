package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/podnet/podnet/dataplane"
	"github.com/podnet/podnet/dataplane/policyrules"
	"github.com/podnet/podnet/internal/testutil"
	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/netns"
	"github.com/podnet/podnet/portmap"
)

// What podnet keeps on the node and in the store for each pod. Every
// piece names the sandbox (container ID) it belongs to, which is how the
// tests find what a deleted pod left: by ID, never by address, since
// another cluster on the machine may hand out the same one.

// Veth is a veth on the node with its alias (podnet's owner tag).
type Veth struct{ Name, Alias string }

// Veths returns the veths in the node's network namespace.
func (n *Node) Veths() ([]Veth, error) {
	var out []Veth
	err := netns.Do(n.NetNS, func() error {
		links, err := netlink.LinkList()
		if err != nil {
			return err
		}
		for _, l := range links {
			if l.Type() == "veth" {
				out = append(out, Veth{Name: l.Attrs().Name, Alias: l.Attrs().Alias})
			}
		}
		return nil
	})
	return out, err
}

// NFTElement is an element of one of podnet's nftables sets or maps in
// the node's namespace.
type NFTElement struct {
	Table, Set string
	// Key is the element's key, rendered (testutil.SetContents) for the
	// address sets, in hex for concatenations.
	Key     string
	Comment string
}

func (e NFTElement) String() string {
	return fmt.Sprintf("%s/%s %s (%q)", e.Table, e.Set, e.Key, e.Comment)
}

// PodNFTElements returns the elements that podnet adds per pod: the
// masquerade table's pod address sets (pods4_*, pods6_*), whose comments
// are "<container ID> <ifname>", every map and set of the host port
// table, whose comments are "<network> <container ID> <ifname>", and
// every set of the source guard's tables (keyed by host veth; the pods
// set's comments are "<network> <container ID> <ifname>"). The
// exclusion sets hold network-wide prefixes and are left out.
func (n *Node) PodNFTElements() ([]NFTElement, error) {
	return n.nftElements([]*nftables.Table{
		{Name: dataplane.MasqTableName, Family: nftables.TableFamilyINet},
		{Name: portmap.TableName, Family: nftables.TableFamilyINet},
		{Name: dataplane.GuardTableName, Family: nftables.TableFamilyINet},
		{Name: dataplane.GuardTableName, Family: nftables.TableFamilyBridge},
	}, func(table, set string) bool {
		return table != dataplane.MasqTableName || strings.HasPrefix(set, "pods")
	})
}

// PolicyPodElements returns the elements that stand for pods in the
// policy service's tables: the isolated pods' dispatch maps of
// podnet-policy (in4, out4, in6, out6) and every set of podnet-closed
// (the pods plugins closed until the agent admits them). The agent
// removes them after a pod's DEL in its next apply, not in the DEL: a
// caller waits for them to go.
func (n *Node) PolicyPodElements() ([]NFTElement, error) {
	dispatch := map[string]bool{"in4": true, "out4": true, "in6": true, "out6": true}
	return n.nftElements([]*nftables.Table{
		{Name: policyrules.TableName, Family: nftables.TableFamilyINet},
		{Name: dataplane.ClosedTableName, Family: nftables.TableFamilyINet},
	}, func(table, set string) bool {
		return table != policyrules.TableName || dispatch[set]
	})
}

// nftElements lists the elements of the sets of tables in the node's
// namespace that keep says to read. A table that does not exist (yet)
// holds none.
func (n *Node) nftElements(tables []*nftables.Table, keep func(table, set string) bool) ([]NFTElement, error) {
	f, err := os.Open(n.NetNS)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	conn, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return nil, err
	}
	var out []NFTElement
	for _, t := range tables {
		tn := t.Name
		sets, err := conn.GetSets(t)
		if err != nil {
			continue // the table does not exist (yet)
		}
		for _, s := range sets {
			if !keep(tn, s.Name) {
				continue
			}
			elems, err := conn.GetSetElements(s)
			if err != nil {
				return nil, fmt.Errorf("nftables %s/%s: %w", tn, s.Name, err)
			}
			keys := testutil.SetContents(s, elems)
			for i, e := range elems {
				key := fmt.Sprintf("%x", e.Key)
				switch {
				case tn == dataplane.GuardTableName && len(e.Key) >= unix.IFNAMSIZ:
					// "<host veth> <the rest in hex>"
					key = strings.TrimRight(string(e.Key[:unix.IFNAMSIZ]), "\x00") + " " + fmt.Sprintf("%x", e.Key[unix.IFNAMSIZ:])
				case !s.Interval && !s.Concatenation && i < len(keys):
					key = keys[i]
				}
				out = append(out, NFTElement{Table: tn, Set: s.Name, Key: key, Comment: e.Comment})
			}
		}
	}
	return out, nil
}

// IPAMRecords are the store's per-pod records: the handles that hold
// addresses (one per attachment, <network>.<container ID>, plus one per
// node gateway), read from the blocks' allocation attributes, and the
// workload endpoints derived from them.
type IPAMRecords struct {
	Handles   []string
	Endpoints []ipam.Endpoint
}

// IPAMRecords reads the handles and workload endpoints from the IPAM
// store the node's plugins write (OpenIPAMStore), under podnet's default
// prefix (the one the shipped manifests use).
func (n *Node) IPAMRecords(ctx context.Context) (*IPAMRecords, error) {
	st, err := n.OpenIPAMStore(ctx)
	if err != nil {
		return nil, err
	}
	defer st.Close()
	keys := ipam.Keys{}
	rec := &IPAMRecords{}
	bs, err := st.List(ctx, keys.Blocks())
	if err != nil {
		return nil, fmt.Errorf("IPAM store: blocks: %w", err)
	}
	seen := map[string]bool{}
	for _, kv := range bs {
		var b ipam.Block
		if err := json.Unmarshal(kv.Value, &b); err != nil {
			return nil, fmt.Errorf("IPAM store: %s: %w", kv.Key, err)
		}
		for _, k := range b.Owners {
			if k <= 0 || k > len(b.Attributes) {
				continue
			}
			if h := b.Attributes[k-1].Handle; h != "" && !seen[h] {
				seen[h] = true
				rec.Handles = append(rec.Handles, h)
			}
		}
	}
	sort.Strings(rec.Handles)
	if rec.Endpoints, err = ipam.New(st, ipam.Config{}).Endpoints(ctx, ""); err != nil {
		return nil, fmt.Errorf("IPAM store: workload endpoints: %w", err)
	}
	return rec, nil
}
