package clusterstatus

import (
	"fmt"
	"slices"

	"github.com/podnet/podnet/agent/agentstatus"
)

// IPAMResources are the podnet.io resources of block IPAM on the API.
var IPAMResources = []string{"ippools", "ipamblocks", "ipamnodes"}

// judgeControl reports the control objects of the agents' model and
// adds their problems to r.
func judgeControl(in Input, docs []*agentstatus.Document, r *Report) ControlReport {
	c := in.Control
	cr := ControlReport{Model: model(docs), IPAMCRDs: c.IPAMCRDs, ClusterNetworkPolicyCRD: c.ClusterNetworkPolicyCRD, Pools: c.Pools, Blocks: len(c.Blocks)}
	if cr.IPAMCRDs == nil {
		cr.IPAMCRDs = []string{}
	}
	if len(c.Blocks) > 0 {
		cr.BlocksByNode = map[string]int{}
		for _, b := range c.Blocks {
			cr.BlocksByNode[b.Node]++
		}
	}
	if c.Error != "" {
		r.Problems = append(r.Problems, "control objects: "+c.Error)
	}
	switch cr.Model {
	case "node-cidr":
		cr.Note = "node-CIDR model: no pools or blocks; each node's pods take addresses from its Node's spec.podCIDRs (kube-controller-manager --allocate-node-cidrs)"
		for _, n := range in.Nodes {
			if len(n.PodCIDRs) == 0 {
				r.Problems = append(r.Problems, fmt.Sprintf("node %s: no spec.podCIDRs: pods on it get no address (is kube-controller-manager run with --allocate-node-cidrs?)", n.Name))
			}
		}
	case "blocks":
		cr.Note = "block IPAM on the API: podnet.io IPPools, IPAMBlocks (affine to nodes) and IPAMNodes"
		for _, res := range IPAMResources {
			if !slices.Contains(c.IPAMCRDs, res) {
				r.Problems = append(r.Problems, fmt.Sprintf("the API server does not serve podnet.io/v1 %s: apply deploy/kubernetes/crds", res))
			}
		}
		if len(c.IPAMCRDs) > 0 && c.Error == "" && !hasEnabledPool(c.Pools) {
			r.Problems = append(r.Problems, "no enabled IPPool: no pod can get an address (the agents create the conflist's pools at start)")
		}
	case "etcd":
		cr.Note = "etcd datastore: pools and blocks are in podnet's etcd, not on the API (podnet ipam show --store etcd://...)"
	}
	judgeEncryption(docs, r)
	return cr
}

func hasEnabledPool(ps []Pool) bool {
	for _, p := range ps {
		if !p.Disabled {
			return true
		}
	}
	return false
}

// judgeEncryption: with WireGuard, a node whose device has fewer peers
// than there are other WireGuard nodes cannot reach some of them (a
// node without a usable key is unreachable, never reached in the
// clear).
func judgeEncryption(docs []*agentstatus.Document, r *Report) {
	wg := 0
	for _, d := range docs {
		if d.Encryption.Mode == "wireguard" {
			wg++
		}
	}
	for _, d := range docs {
		if d.Encryption.Mode != "wireguard" || !d.Ready {
			continue
		}
		if d.Encryption.Peers < wg-1 {
			r.Warnings = append(r.Warnings, fmt.Sprintf("node %s: wireguard has %d peers of %d other WireGuard nodes: pods on the others are unreachable from it until they publish a key",
				d.Node, d.Encryption.Peers, wg-1))
		}
	}
}
