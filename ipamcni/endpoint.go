package ipamcni

import (
	"context"

	"github.com/podnet/podnet/ipam"
)

// PodInterface is what an ADD or DEL knows of the pod interface. With
// IfName set, the allocation records the pod's workload endpoint (its ID
// and creation time, in the addresses' attributes: ipam/endpoint.go), in
// the allocation's own block write.
type PodInterface struct {
	ContainerID string
	IfName      string
	Args        [][2]string // CNI_ARGS pairs: K8S_POD_NAMESPACE, K8S_POD_NAME
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

// endpoint is the endpoint to record for at, or nil when at has no IfName.
func (p *IPAM) endpoint(at PodInterface) *ipam.EndpointID {
	if at.IfName == "" {
		return nil
	}
	id := EndpointID(p.req.Config.Node, at)
	return &id
}

// DelAttachment releases the attachment's addresses, on this node: one
// block write in steady state. The endpoint goes with them (it is their
// attributes); the DEL of a sandbox that a newer one of the same pod
// replaced frees only its own addresses, and the newer one is then the
// endpoint.
func (p *IPAM) DelAttachment(ctx context.Context, at PodInterface) error {
	return cniError(p.nodeLocked(ctx, func() error {
		return p.alloc.ReleaseByHandle(ctx, p.req.Config.Node, Handle(p.req.Network, at.ContainerID))
	}))
}

// Allocator is the IPAM's allocator, for callers that inspect the store
// (tests, `podnet ipam`).
func (p *IPAM) Allocator() *ipam.Allocator { return p.alloc }
