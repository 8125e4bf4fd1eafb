package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/podnet/podnet/ipam"
)

// NodeCIDRInstall is the node-CIDR model's side of the install: every
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
type NodeCIDRInstall struct {
	// Store is the plugin's store, "bolt:PATH"; the agent's GC cleans the
	// same file.
	Store        string
	ClusterCIDRs []netip.Prefix
}

// edit rewrites doc's podnet-ipam sections for podCIDRs.
func (n *NodeCIDRInstall) edit(doc map[string]any, podCIDRs []netip.Prefix) error {
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

// ownPodCIDRs are this node's podCIDRs as the Kubernetes datastore last
// said.
func (a *Agent) ownPodCIDRs() []netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.state.podCIDRs[a.cfg.Node])
}

// installNodeCIDRs installs the plugins, then writes the config each time
// the node's podCIDRs change, the first time once they are known: until
// then the node has no config, and its runtime reports the network not
// ready. The agent is ready once the first config is written. When the
// Node is deleted, the last config stays until the Node comes back with
// podCIDRs of its own: removing it would take the node out of service
// while its kubelet registers again.
func (a *Agent) installNodeCIDRs(ctx context.Context) {
	ic := a.cfg.Install
	var written []byte
	var retry <-chan time.Time
	backoff := 500 * time.Millisecond
	pluginsDone := false
	for {
		if cidrs := a.ownPodCIDRs(); len(cidrs) > 0 {
			err := a.installFor(cidrs, &written, &pluginsDone)
			retry = nil
			if err != nil {
				a.log.Error("install failed", "pod_cidrs", cidrs, "err", err, "retry_in", backoff)
				retry = time.After(backoff)
				backoff = min(2*backoff, 5*time.Second)
			} else {
				backoff = 500 * time.Millisecond
			}
		} else if written == nil {
			a.log.Info("waiting for the Node's spec.podCIDRs before installing the network config", "path", ic.confPath())
		}
		select {
		case <-ctx.Done():
			return
		case <-a.kube.ownChanged:
		case <-retry:
		}
	}
}

// installFor writes the config for cidrs unless it is what was last
// written, installing the plugins first if they are not yet.
func (a *Agent) installFor(cidrs []netip.Prefix, written *[]byte, pluginsDone *bool) error {
	ic := a.cfg.Install
	conf, err := ic.conf(a.cfg.Node, cidrs)
	if err != nil {
		return err
	}
	if bytes.Equal(conf.data, *written) {
		return nil
	}
	if !*pluginsDone {
		if err := ic.installPlugins(); err != nil {
			return err
		}
		*pluginsDone = true
	}
	path, err := ic.write(conf.data)
	if err != nil {
		return err
	}
	*written = conf.data
	a.installed.Store(true)
	a.logInstalled(path, conf, "pod_cidrs", cidrs)
	a.markReady()
	return nil
}
