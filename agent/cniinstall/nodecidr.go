package cniinstall

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"github.com/podnet/podnet/ipam"
)

// NodeCIDR is the node-CIDR model's side of the install: every
// node hands out its pods' addresses from its own Node.spec.podCIDRs,
// which kube-controller-manager (--allocate-node-cidrs) assigns, in a
// bbolt file of its own. The agent rewrites the shipped conflist's
// podnet-ipam for that:
//
//   - pools: one per podCIDR, named after it ("node-10.244.1.0-24"), so
//     that a node given another CIDR (a Node deleted and registered
//     again) gets a new pool instead of the store's old one of the same
//     name, with a block size that fits the CIDR;
//   - store: Store, the node-local file: the plugin talks to nothing else;
//   - masqExclude of the plugin that uses it: ClusterCIDRs, the whole
//     cluster's pod range. The node's own CIDR would not do: traffic to
//     pods on other nodes would be masqueraded.
type NodeCIDR struct {
	// Store is the plugin's store, "bolt:PATH"; the agent's GC cleans the
	// same file.
	Store        string
	ClusterCIDRs []netip.Prefix
}

// edit rewrites doc's podnet-ipam sections for podCIDRs.
func (n *NodeCIDR) edit(doc map[string]any, podCIDRs []netip.Prefix) error {
	if !strings.HasPrefix(n.Store, "bolt:") {
		return fmt.Errorf("store %q: the node-CIDR model keeps each node's addresses in a local bolt:PATH", n.Store)
	}
	if len(podCIDRs) == 0 {
		return errors.New("no podCIDRs")
	}
	plugins, ipams := ipamPlugins(doc)
	if len(ipams) == 0 {
		return errors.New("no plugin with podnet-ipam: nothing would use the node's podCIDRs")
	}
	var pools []any
	for _, p := range podCIDRs {
		pools = append(pools, map[string]any{"name": NodeCIDRPoolName(p), "cidr": p.String(), "blockSize": NodeCIDRBlockSize(p)})
	}
	var exclude []any
	for _, p := range n.ClusterCIDRs {
		exclude = append(exclude, p.String())
	}
	for i, ipamConf := range ipams {
		ipamConf["pools"] = pools
		ipamConf["store"] = n.Store
		if masq, set := plugins[i]["ipMasq"].(bool); !set || masq {
			if len(exclude) == 0 {
				return errors.New("ipMasq without cluster CIDRs: pod traffic between nodes would be masqueraded; set --cluster-cidr")
			}
			plugins[i]["masqExclude"] = exclude
		}
	}
	return nil
}

// NodeCIDRPoolName is the IPAM pool of a podCIDR in the node-CIDR model.
func NodeCIDRPoolName(p netip.Prefix) string {
	return "node-" + strings.NewReplacer("/", "-", ":", "-").Replace(p.Masked().String())
}

// NodeCIDRBlockSize is the block size of a podCIDR's pool: the family's
// default (/26, /122) when the CIDR holds such blocks, else the CIDR
// itself as one block. A block never crosses the CIDR.
func NodeCIDRBlockSize(p netip.Prefix) int {
	if p.Addr().Is4() {
		return max(p.Bits(), ipam.DefaultBlockSize4)
	}
	return max(p.Bits(), ipam.DefaultBlockSize6)
}
