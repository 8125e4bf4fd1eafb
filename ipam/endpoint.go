package ipam

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"time"
)

// Workload endpoints (what Calico calls a WorkloadEndpoint): the record of
// one pod interface, under workloads/<node>/<namespace>/<pod>/<ifname>,
// naming the container that holds it now and the handle of its addresses.
//
// The endpoint is written in the allocation's own transaction
// (AutoAssignArgs.Endpoint), so an allocation made for an endpoint never
// exists without it, and deleted in the release's transaction
// (ReleaseAttachment) only while it still names the releasing container.
// A new sandbox of the same pod replaces the endpoint; the old sandbox's
// DEL then frees the old addresses and leaves the new endpoint alone.
//
// Allocations made for an endpoint carry its ID in the attribute
// AttrEndpoint, which is how Check with CheckOptions.Endpoints tells a live
// allocation (its endpoint names its handle) from a leaked one (the
// endpoint is gone or names another handle). Allocations without the
// attribute (per-node gateways, addresses from the standalone podnet-ipam
// plugin, allocations older than endpoints) are not judged by endpoints.

// AttrEndpoint is the allocation attribute holding the EndpointID (its
// String form) an allocation was made for.
const AttrEndpoint = "endpoint"

// NoNamespace is the namespace of an endpoint whose runtime gave no
// K8S_POD_NAMESPACE/K8S_POD_NAME; its pod name is then the container ID.
const NoNamespace = "_"

// EndpointID names a pod interface: the key of its endpoint.
type EndpointID struct {
	Node      string `json:"node"`
	Namespace string `json:"namespace"`
	Pod       string `json:"pod"`
	IfName    string `json:"ifName"`
}

// String is node/namespace/pod/ifname, the key's suffix.
func (id EndpointID) String() string {
	return id.Node + "/" + id.Namespace + "/" + id.Pod + "/" + id.IfName
}

// Validate rejects IDs whose parts would break the key layout.
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

// Endpoint is the value under workloads/<node>/<namespace>/<pod>/<ifname>.
type Endpoint struct {
	Node        string `json:"node"`
	Namespace   string `json:"namespace"`
	Pod         string `json:"pod"`
	IfName      string `json:"ifName"`
	ContainerID string `json:"containerID"`
	Network     string `json:"network"`
	// Handle holds the endpoint's addresses (<network>.<containerID>).
	Handle string `json:"handle"`
	// IPs are the pod's addresses, host-length (/32, /128). The allocator
	// fills them in from the handle when it writes the endpoint.
	IPs []netip.Prefix `json:"ips"`
	// MAC is the pod-side interface's; HostInterface the host-side veth.
	MAC           string    `json:"mac,omitempty"`
	HostInterface string    `json:"hostInterface,omitempty"`
	Created       time.Time `json:"created"`
}

// ID is the endpoint's key.
func (e Endpoint) ID() EndpointID {
	return EndpointID{Node: e.Node, Namespace: e.Namespace, Pod: e.Pod, IfName: e.IfName}
}

// sameAs reports whether e and o say the same thing (Created aside).
func (e Endpoint) sameAs(o Endpoint) bool {
	return e.ID() == o.ID() && e.ContainerID == o.ContainerID && e.Network == o.Network &&
		e.Handle == o.Handle && slices.Equal(e.IPs, o.IPs) && e.MAC == o.MAC && e.HostInterface == o.HostInterface
}

// Workloads is the prefix of every endpoint.
func (k Keys) Workloads() string { return k.prefix() + "workloads/" }

// NodeWorkloads is the prefix of node's endpoints.
func (k Keys) NodeWorkloads(node string) string { return k.Workloads() + node + "/" }

// Workload is the key of endpoint id.
func (k Keys) Workload(id EndpointID) string { return k.Workloads() + id.String() }

// endpointRef is an endpoint in a writeSet.
type endpointRef struct {
	key   string
	ep    *Endpoint // nil: does not exist (or is to be deleted)
	rev   int64
	dirty bool
}

// endpoint reads id into w on first use.
func (w *writeSet) endpoint(ctx context.Context, id EndpointID) (*endpointRef, error) {
	key := w.a.keys.Workload(id)
	if w.ep != nil {
		if w.ep.key != key {
			return nil, errorf(KindInternal, "one operation, two endpoints %s and %s", w.ep.key, key)
		}
		return w.ep, nil
	}
	r := &endpointRef{key: key}
	kv, err := w.a.store.Get(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
	case err != nil:
		return nil, err
	default:
		ep, err := decodeEndpoint(kv)
		if err != nil {
			// Undecodable: replace it rather than fail every ADD of
			// the pod. The compare still guards the revision.
			ep = nil
		}
		r.ep, r.rev = ep, kv.ModRevision
		if ep == nil {
			r.dirty = true
		}
	}
	w.ep = r
	return r, nil
}

func decodeEndpoint(kv KV) (*Endpoint, error) {
	ep := new(Endpoint)
	if err := json.Unmarshal(kv.Value, ep); err != nil {
		return nil, fmt.Errorf("endpoint %s: %w", kv.Key, err)
	}
	return ep, nil
}

// setEndpoint makes ep (with IPs set to addrs) the endpoint, replacing one
// of another container; it writes nothing when the stored one already
// says the same.
func (w *writeSet) setEndpoint(ctx context.Context, ep Endpoint, addrs []netip.Prefix) error {
	r, err := w.endpoint(ctx, ep.ID())
	if err != nil {
		return err
	}
	ep.IPs = make([]netip.Prefix, 0, len(addrs))
	for _, p := range addrs {
		ep.IPs = append(ep.IPs, netip.PrefixFrom(p.Addr(), p.Addr().BitLen()))
	}
	slices.SortFunc(ep.IPs, comparePrefix)
	if r.ep != nil && r.ep.sameAs(ep) {
		return nil
	}
	switch {
	case r.ep != nil && r.ep.ContainerID == ep.ContainerID && !r.ep.Created.IsZero():
		ep.Created = r.ep.Created
	case ep.Created.IsZero():
		ep.Created = w.a.cfg.Now().UTC()
	}
	r.ep, r.dirty = &ep, true
	return nil
}

// dropEndpoint deletes endpoint id if it names containerID.
func (w *writeSet) dropEndpoint(ctx context.Context, id EndpointID, containerID string) error {
	r, err := w.endpoint(ctx, id)
	if err != nil {
		return err
	}
	if r.ep != nil && r.ep.ContainerID == containerID {
		r.ep, r.dirty = nil, true
	}
	return nil
}

// endpointOps is the endpoint's share of a commit.
func (w *writeSet) endpointOps() ([]Compare, []Op, error) {
	r := w.ep
	if r == nil || !r.dirty {
		return nil, nil, nil
	}
	cmps := []Compare{{Key: r.key, ModRevision: r.rev}}
	if r.ep == nil {
		if r.rev == 0 {
			return nil, nil, nil
		}
		return cmps, []Op{Del(r.key)}, nil
	}
	v, err := json.Marshal(r.ep)
	if err != nil {
		return nil, nil, err
	}
	return cmps, []Op{Put(r.key, v)}, nil
}

// withEndpointAttr returns attrs with AttrEndpoint set to id, copied.
func withEndpointAttr(attrs map[string]string, id EndpointID) map[string]string {
	out := maps.Clone(attrs)
	if out == nil {
		out = map[string]string{}
	}
	out[AttrEndpoint] = id.String()
	return out
}

func validEndpoint(ep *Endpoint, handle, node string) error {
	id := ep.ID()
	if err := id.Validate(); err != nil {
		return err
	}
	if ep.Node != node {
		return errorf(KindInvalid, "endpoint %s: node %q, but the allocation is for node %q", id, ep.Node, node)
	}
	if ep.ContainerID == "" {
		return errorf(KindInvalid, "endpoint %s: no container ID", id)
	}
	if ep.Handle != "" && ep.Handle != handle {
		return errorf(KindInvalid, "endpoint %s: handle %q, but the allocation is for handle %q", id, ep.Handle, handle)
	}
	return nil
}

// PutEndpoint writes ep with IPs set to what its handle holds, replacing
// an endpoint of another container: for addresses assigned without
// AutoAssign (requested IPs), one transaction after the allocation. It is
// a no-op when the stored endpoint already says the same.
func (a *Allocator) PutEndpoint(ctx context.Context, ep Endpoint) error {
	if err := validEndpoint(&ep, ep.Handle, ep.Node); err != nil {
		return err
	}
	if err := validName("handle", ep.Handle); err != nil {
		return err
	}
	return a.retry(ctx, "write endpoint "+ep.ID().String(), func(ctx context.Context) error {
		w := a.newWriteSet()
		held, err := a.held(ctx, w, ep.Handle)
		if err != nil {
			return err
		}
		if err := w.setEndpoint(ctx, ep, held); err != nil {
			return err
		}
		return w.commit(ctx)
	})
}

// ReleaseAttachment is the DEL of an attachment: it frees every address
// of handle and deletes its endpoint if the endpoint still names
// containerID, in one transaction. The endpoint is the one ADD recorded
// in the addresses' attributes; id, what the DEL's own arguments name,
// counts only when none is recorded: a runtime whose DEL lacks the pod
// arguments of its ADD must not leave the endpoint behind. An endpoint
// that a newer sandbox of the pod took over is left alone. Releasing
// what does not exist succeeds.
func (a *Allocator) ReleaseAttachment(ctx context.Context, handle string, id EndpointID, containerID string) error {
	if err := validName("handle", handle); err != nil {
		return err
	}
	if err := id.Validate(); err != nil {
		return err
	}
	return a.retry(ctx, "release handle "+quote(handle)+" of endpoint "+id.String(), func(ctx context.Context) error {
		w := a.newWriteSet()
		drop := id
		if rec, ok, err := recordedEndpoint(ctx, w, handle); err != nil {
			return err
		} else if ok {
			drop = rec
		}
		if err := a.releaseHandle(ctx, w, handle); err != nil {
			return err
		}
		if err := w.dropEndpoint(ctx, drop, containerID); err != nil {
			return err
		}
		return w.commit(ctx)
	})
}

// recordedEndpoint is the endpoint named in the attributes of handle's
// addresses (AttrEndpoint), read through w so that the release that
// follows reads nothing twice.
func recordedEndpoint(ctx context.Context, w *writeSet, handle string) (EndpointID, bool, error) {
	_, blocks, err := w.handleBlocks(ctx, handle)
	if err != nil {
		return EndpointID{}, false, err
	}
	for _, r := range blocks {
		for _, addr := range r.b.AddrsOf(handle) {
			at, _ := r.b.Owner(addr)
			if id, err := ParseEndpointID(at.Extra[AttrEndpoint]); err == nil {
				return id, true, nil
			}
		}
	}
	return EndpointID{}, false, nil
}

// GetEndpoint returns endpoint id, or a KindNotFound error if there is
// none.
func (a *Allocator) GetEndpoint(ctx context.Context, id EndpointID) (Endpoint, error) {
	var out Endpoint
	err := a.retry(ctx, "read endpoint "+id.String(), func(ctx context.Context) error {
		kv, err := a.store.Get(ctx, a.keys.Workload(id))
		if errors.Is(err, ErrNotFound) {
			return errorf(KindNotFound, "endpoint %s: none", id)
		}
		if err != nil {
			return err
		}
		ep, err := decodeEndpoint(kv)
		if err != nil {
			return err
		}
		out = *ep
		return nil
	})
	return out, err
}

// Endpoints lists the endpoints of node, or of every node when node is
// empty, in key order. Undecodable values are skipped (Check reports them).
func (a *Allocator) Endpoints(ctx context.Context, node string) ([]Endpoint, error) {
	prefix := a.keys.Workloads()
	if node != "" {
		prefix = a.keys.NodeWorkloads(node)
	}
	var out []Endpoint
	err := a.retry(ctx, "list endpoints", func(ctx context.Context) error {
		kvs, _, err := a.store.List(ctx, prefix)
		if err != nil {
			return err
		}
		out = out[:0]
		for _, kv := range kvs {
			if ep, err := decodeEndpoint(kv); err == nil {
				out = append(out, *ep)
			}
		}
		return nil
	})
	return out, err
}

// CheckWithEndpoints is Check with leaks judged by the workload endpoints
// (CheckOptions{Endpoints: true}): what `podnet ipam check` runs when the
// network keeps endpoints.
func (a *Allocator) CheckWithEndpoints(ctx context.Context) (Report, error) {
	return a.Check(ctx, CheckOptions{Endpoints: true})
}
