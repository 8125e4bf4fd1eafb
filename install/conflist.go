package install

import (
	"encoding/json"
	"fmt"
	"net/netip"

	"github.com/podnet/podnet/cni"
)

// Network describes the network podnet installs.
type Network struct {
	Name string // network name (default "podnet")
	Mode string // "routed" (default) or "bridge"
	// Pools are the pod address pools, e.g. 10.244.0.0/16; one per
	// family for dual-stack. Empty: DefaultPool.
	Pools []string
	// Store is the IPAM store: "bolt:/var/lib/podnet/ipam.db" (default)
	// or "etcd://host:port,...".
	Store string
	Node  string // node name for IPAM; empty: the host name
	MTU   int    // 0: the plugin's default
	// IPMasq masquerades pod traffic leaving the pools (default true).
	// The pools are written as masqExclude: traffic between pods of the
	// cluster is never NATed, whatever the IPAM's result says.
	IPMasq *bool
	// PortmapPlugin publishes host ports with podnet-portmap chained
	// after podnet (the layout of the reference plugins) instead of in
	// podnet's own process: the same rules, one more plugin exec per pod.
	PortmapPlugin bool
}

// Defaults for a single machine with nothing else running.
const (
	DefaultNetworkName = "podnet"
	DefaultPool        = "10.244.0.0/16"
	DefaultStore       = "bolt:/var/lib/podnet/ipam.db"
)

// Versions a generated config declares. cniVersion is the newest that
// every runtime in use reads (containerd 1.6's libcni reads results up to
// 1.0.0 and refuses 1.1.0), and cniVersions lets a runtime that knows it
// pick 1.1.0, with GC and STATUS. libcni before 1.2 ignores cniVersions.
const ConfCNIVersion = "1.0.0"

// ConfCNIVersions is the cniVersions list of a generated config.
var ConfCNIVersions = []string{"1.0.0", "1.1.0"}

// PluginNames are the binaries a podnet network needs.
var PluginNames = []string{"podnet", "podnet-ipam", "podnet-portmap", "loopback"}

// ConfList returns the conflist for n: podnet with podnet-ipam, declaring
// the portMappings capability, so that addresses, interfaces, masquerade
// and host ports are all one plugin exec per pod; with PortmapPlugin,
// podnet and then podnet-portmap, which declares the capability.
func ConfList(n Network) ([]byte, error) {
	if n.Name == "" {
		n.Name = DefaultNetworkName
	}
	if err := cni.ValidateNetworkName(n.Name); err != nil {
		return nil, fmt.Errorf("--network: %w", err)
	}
	switch n.Mode {
	case "":
		n.Mode = "routed"
	case "routed", "bridge":
	default:
		return nil, fmt.Errorf("--mode %q: want routed or bridge", n.Mode)
	}
	pools, err := parsePools(n.Pools)
	if err != nil {
		return nil, err
	}
	if n.Store == "" {
		n.Store = DefaultStore
	}
	if n.MTU < 0 || n.MTU > 65535 {
		return nil, fmt.Errorf("--mtu %d: out of range", n.MTU)
	}
	masq := n.IPMasq == nil || *n.IPMasq
	var poolList []map[string]any
	var cidrs []string
	for i, p := range pools {
		poolList = append(poolList, map[string]any{"name": poolName(pools, i), "cidr": p.String()})
		cidrs = append(cidrs, p.String())
	}
	ipam := map[string]any{
		"type":  "podnet-ipam",
		"store": n.Store,
		"pools": poolList,
	}
	if n.Node != "" {
		ipam["node"] = n.Node
	}
	ports := map[string]bool{"portMappings": true}
	main := map[string]any{"type": "podnet", "mode": n.Mode, "ipMasq": masq, "ipam": ipam}
	if masq {
		main["masqExclude"] = cidrs
	}
	plugins := []any{main}
	if n.PortmapPlugin {
		plugins = append(plugins, map[string]any{"type": "podnet-portmap", "capabilities": ports})
	} else {
		main["capabilities"] = ports
	}
	if n.MTU > 0 {
		main["mtu"] = n.MTU
	}
	doc := map[string]any{
		"cniVersion":  ConfCNIVersion,
		"cniVersions": ConfCNIVersions,
		"name":        n.Name,
		"plugins":     plugins,
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	// What podnet writes, podnet must read.
	if _, err := cni.ParseNetworkConfigList(b, "generated config"); err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// parsePools validates the pools: network prefixes that do not overlap.
func parsePools(in []string) ([]netip.Prefix, error) {
	if len(in) == 0 {
		in = []string{DefaultPool}
	}
	var out []netip.Prefix
	for _, s := range in {
		p, err := netip.ParsePrefix(s)
		if err != nil || p != p.Masked() {
			return nil, fmt.Errorf("--pool %q: want a network prefix such as %s", s, DefaultPool)
		}
		for _, o := range out {
			if o.Overlaps(p) {
				return nil, fmt.Errorf("--pool %s overlaps --pool %s", p, o)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// poolName names the i-th pool: "default" for the first of a family
// ("default6" for IPv6), with a number after it for more of that family.
func poolName(pools []netip.Prefix, i int) string {
	name := "default"
	if pools[i].Addr().Is6() {
		name = "default6"
	}
	n := 0
	for _, p := range pools[:i] {
		if p.Addr().Is4() == pools[i].Addr().Is4() {
			n++
		}
	}
	if n > 0 {
		name += fmt.Sprintf("-%d", n+1)
	}
	return name
}

// ConfFileName is the file name a network is installed under; the prefix
// sorts it before most others, so it becomes the default network.
func ConfFileName(network string) string { return "10-" + network + ".conflist" }
