package ipamcni

import (
	"context"

	"github.com/podnet/podnet/ipam"
)

// PodInterface is what an ADD or DEL knows of the pod interface. With
// IfName set, the IPAM keeps the pod's workload endpoint
// (workloads/<node>/<namespace>/<pod>/<ifname>) in the store: written in
// the allocation's transaction, removed in the release's.
type PodInterface struct {
	ContainerID string
	IfName      string
	Args        [][2]string // CNI_ARGS pairs: K8S_POD_NAMESPACE, K8S_POD_NAME
	// MAC (pod side) and HostInterface (host side) are recorded in the
	// endpoint; the podnet plugin derives both before wiring the pod.
	MAC, HostInterface string
}

// EndpointID is the endpoint of an attachment on node. The pod comes from
// K8S_POD_NAMESPACE and K8S_POD_NAME; a runtime that passes neither (podnet
// run, cnitool) gets namespace "_" (ipam.NoNamespace) and the container ID
// as the pod name, so each sandbox is its own "pod".
func EndpointID(node string, at PodInterface) ipam.EndpointID {
	id := ipam.EndpointID{Node: node, IfName: at.IfName}
	for _, kv := range at.Args {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			id.Namespace = kv[1]
		case "K8S_POD_NAME":
			id.Pod = kv[1]
		}
	}
	if id.Namespace == "" || id.Pod == "" {
		id.Namespace, id.Pod = ipam.NoNamespace, at.ContainerID
	}
	return id
}

// endpoint is the endpoint to write for at, or nil when at has no IfName.
func (p *IPAM) endpoint(at PodInterface) *ipam.Endpoint {
	if at.IfName == "" {
		return nil
	}
	id := EndpointID(p.req.Config.Node, at)
	return &ipam.Endpoint{
		Node: id.Node, Namespace: id.Namespace, Pod: id.Pod, IfName: id.IfName,
		ContainerID: at.ContainerID, Network: p.req.Network, Handle: Handle(p.req.Network, at.ContainerID),
		MAC: at.MAC, HostInterface: at.HostInterface,
	}
}

// DelAttachment releases the attachment's addresses and, in the same
// transaction, its endpoint if the endpoint still names this container:
// the DEL of a sandbox that a newer one of the same pod replaced frees
// only its own addresses.
func (p *IPAM) DelAttachment(ctx context.Context, at PodInterface) error {
	handle := Handle(p.req.Network, at.ContainerID)
	if at.IfName == "" {
		return cniError(p.alloc.ReleaseByHandle(ctx, handle))
	}
	return cniError(p.alloc.ReleaseAttachment(ctx, handle, EndpointID(p.req.Config.Node, at), at.ContainerID))
}

// putEndpoint records the endpoint of addresses assigned one by one
// (requested IPs), which AutoAssign's transaction did not carry.
func (p *IPAM) putEndpoint(ctx context.Context, ep *ipam.Endpoint) error {
	if ep == nil {
		return nil
	}
	return p.alloc.PutEndpoint(ctx, *ep)
}

// Allocator is the IPAM's allocator, for callers that inspect the store
// (tests, `podnet ipam`).
func (p *IPAM) Allocator() *ipam.Allocator { return p.alloc }
