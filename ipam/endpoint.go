package ipam

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Workload endpoints (what Calico calls a WorkloadEndpoint): the record of
// one pod interface, naming the container that holds it now and the
// handle of its addresses. Layout v2 stores no endpoint objects: each
// allocation made for an endpoint carries its ID (AttrEndpoint) and its
// creation time (AttrCreated), in the block, written by the allocation's
// own block write. The endpoint is derived: endpoint ID on node N is the
// handle whose allocations in N's indexed blocks name it with the newest
// AttrCreated (a new sandbox of the pod replaces an older one), container
// ID and network split from the handle at its last '.'.
//
// So an allocation never exists without its endpoint, and a release
// removes the endpoint with the addresses; the DEL of an old sandbox frees
// only its own addresses and leaves the new endpoint alone. Allocations
// whose endpoint has a newer handle are what Check with
// CheckOptions.Endpoints calls leaked. Allocations without the attribute
// (per-node gateways, addresses from the standalone podnet-ipam plugin)
// are not judged by endpoints.

// AttrEndpoint is the allocation attribute holding the EndpointID (its
// String form) an allocation was made for.
const AttrEndpoint = "endpoint"

// AttrCreated is the allocation attribute holding when an allocation for
// an endpoint was made (RFC 3339, nanoseconds, UTC).
const AttrCreated = "created"

// NoNamespace is the namespace of an endpoint whose runtime gave no
// K8S_POD_NAMESPACE/K8S_POD_NAME; its pod name is then the container ID.
const NoNamespace = "_"

// EndpointID names a pod interface.
type EndpointID struct {
	Node      string `json:"node"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	IfName    string `json:"ifName"`
}

// String is node/namespace/pod/ifname.
func (id EndpointID) String() string {
	return id.Node + "/" + id.Namespace + "/" + id.Pod + "/" + id.IfName
}

// Validate rejects IDs whose parts would make the String form ambiguous.
func (id EndpointID) Validate() error {
	for _, p := range []struct{ kind, v string }{{"node", id.Node}, {"namespace", id.Namespace}, {"pod", id.Pod}, {"interface", id.IfName}} {
		if err := validName("endpoint "+p.kind, p.v); err != nil {
			return err
		}
	}
	return nil
}

// ParseEndpointID reads the String form.
func ParseEndpointID(s string) (EndpointID, error) {
	f := strings.Split(s, "/")
	if len(f) != 4 {
		return EndpointID{}, fmt.Errorf("endpoint %q: want node/namespace/pod/ifname", s)
	}
	id := EndpointID{Node: f[0], Namespace: f[1], Pod: f[2], IfName: f[3]}
	return id, id.Validate()
}

// Endpoint is a workload endpoint as derived from its allocations. The
// pod interface's MAC and host-side link are not stored: they follow from
// container ID and interface name (package dataplane).
type Endpoint struct {
	EndpointID
	ContainerID string `json:"containerID"`
	Network     string `json:"network"`
	// Handle holds the endpoint's addresses (<network>.<containerID>).
	Handle string `json:"handle"`
	// IPs are the pod's addresses, host-length (/32, /128), sorted.
	IPs     []netip.Prefix `json:"ips"`
	Created time.Time      `json:"created"`
}

// ID is the endpoint's ID.
func (e Endpoint) ID() EndpointID { return e.EndpointID }

func validEndpoint(id EndpointID, node string) error {
	if err := id.Validate(); err != nil {
		return err
	}
	if id.Node != node {
		return errorf(KindInvalid, "endpoint %s: node %q, but the allocation is for node %q", id, id.Node, node)
	}
	return nil
}

// endpointAttrs returns attrs with AttrEndpoint and AttrCreated set,
// copied.
func endpointAttrs(attrs map[string]string, id EndpointID, now time.Time) map[string]string {
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]string{}
	}
	out[AttrEndpoint] = id.String()
	out[AttrCreated] = now.UTC().Format(time.RFC3339Nano)
	return out
}

// deriveEndpoints returns the endpoints the allocations of blocks name,
// by ID string; only IDs on node when node is set.
func deriveEndpoints(blocks []*Block, node string) map[string]*Endpoint {
	type cand struct {
		ips     []netip.Prefix
		created time.Time
	}
	byID := map[string]map[string]*cand{} // id -> handle -> candidate
	for _, b := range blocks {
		for ord, ref := range b.Owners {
			if ref == 0 {
				continue
			}
			at := b.Attributes[ref-1]
			id := at.Extra[AttrEndpoint]
			if id == "" || node != "" && !strings.HasPrefix(id, node+"/") {
				continue
			}
			if byID[id] == nil {
				byID[id] = map[string]*cand{}
			}
			c := byID[id][at.Handle]
			if c == nil {
				c = &cand{}
				byID[id][at.Handle] = c
			}
			c.ips = append(c.ips, netip.PrefixFrom(b.Addr(ord), b.CIDR.Addr().BitLen()))
			if t, err := time.Parse(time.RFC3339Nano, at.Extra[AttrCreated]); err == nil && t.After(c.created) {
				c.created = t
			}
		}
	}
	out := map[string]*Endpoint{}
	for s, hs := range byID {
		eid, err := ParseEndpointID(s)
		if err != nil {
			continue
		}
		// The newest handle wins; equal times (clock steps) by name.
		h := slices.MaxFunc(slices.Collect(maps.Keys(hs)), func(x, y string) int {
			return cmp.Or(hs[x].created.Compare(hs[y].created), strings.Compare(x, y))
		})
		ep := &Endpoint{EndpointID: eid, Handle: h, IPs: hs[h].ips, Created: hs[h].created}
		if i := strings.LastIndexByte(h, '.'); i >= 0 {
			ep.Network, ep.ContainerID = h[:i], h[i+1:]
		}
		slices.SortFunc(ep.IPs, comparePrefix)
		out[s] = ep
	}
	return out
}

// nodeBlocks reads node's index and every block it names (claims in any
// state, borrowed blocks), through any store cache.
func (a *Allocator) nodeBlocks(ctx context.Context, node string) (*indexRef, []*Block, error) {
	ctx = FreshRead(ctx)
	w := a.newWriteSet()
	ix, err := w.index(ctx, node)
	if err != nil || ix.x == nil {
		return ix, nil, err
	}
	var out []*Block
	for _, cidr := range ix.x.allCIDRs() {
		r, err := w.block(ctx, cidr)
		if err != nil {
			return nil, nil, err
		}
		if r.b != nil {
			out = append(out, r.b)
		}
	}
	return ix, out, nil
}

// allCIDRs is every block the index names, pendingDeletion claims too.
func (x *NodeIndex) allCIDRs() []netip.Prefix {
	out := x.cidrs()
	for _, e := range x.Blocks {
		if !slices.Contains(out, e.CIDR) {
			out = append(out, e.CIDR)
		}
	}
	slices.SortFunc(out, comparePrefix)
	return out
}

// GetEndpoint returns endpoint id, or a KindNotFound error if no
// allocation names it.
func (a *Allocator) GetEndpoint(ctx context.Context, id EndpointID) (Endpoint, error) {
	var out Endpoint
	err := a.retry(ctx, "read endpoint "+id.String(), func(ctx context.Context) error {
		_, blocks, err := a.nodeBlocks(ctx, id.Node)
		if err != nil {
			return err
		}
		ep := deriveEndpoints(blocks, id.Node)[id.String()]
		if ep == nil {
			return errorf(KindNotFound, "endpoint %s: none", id)
		}
		out = *ep
		return nil
	})
	return out, err
}

// Endpoints lists the endpoints of node, or of every node when node is
// empty (which reads every block), by ID.
func (a *Allocator) Endpoints(ctx context.Context, node string) ([]Endpoint, error) {
	var out []Endpoint
	err := a.retry(ctx, "list endpoints", func(ctx context.Context) error {
		var blocks []*Block
		if node != "" {
			var err error
			if _, blocks, err = a.nodeBlocks(ctx, node); err != nil {
				return err
			}
		} else {
			kvs, err := a.store.List(ctx, a.keys.Blocks())
			if err != nil {
				return err
			}
			for _, kv := range kvs {
				if b, err := decodeBlock(kv); err == nil {
					blocks = append(blocks, b)
				}
			}
		}
		eps := deriveEndpoints(blocks, node)
		out = out[:0]
		for _, k := range sortedKeys(eps) {
			out = append(out, *eps[k])
		}
		return nil
	})
	return out, err
}

// CheckWithEndpoints is Check with leaks judged by the workload endpoints
// (CheckOptions{Endpoints: true}): what `podnet ipam check` runs.
func (a *Allocator) CheckWithEndpoints(ctx context.Context) (Report, error) {
	return a.Check(ctx, CheckOptions{Endpoints: true})
}
