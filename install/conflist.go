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
	Pool string // the pod address pool, e.g. 10.244.0.0/16
	// Store is the IPAM store: "bolt:/var/lib/podnet/ipam.db" (default)
	// or "etcd://host:port,...".
	Store string
	Node  string // node name for IPAM; empty: the host name
	MTU   int    // 0: the plugin's default
	// IPMasq masquerades pod traffic leaving the pool (default true).
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
	if n.Pool == "" {
		n.Pool = DefaultPool
	}
	pool, err := netip.ParsePrefix(n.Pool)
	if err != nil || pool != pool.Masked() {
		return nil, fmt.Errorf("--pool %q: want a network prefix such as %s", n.Pool, DefaultPool)
	}
	if n.Store == "" {
		n.Store = DefaultStore
	}
	if n.MTU < 0 || n.MTU > 65535 {
		return nil, fmt.Errorf("--mtu %d: out of range", n.MTU)
	}
	masq := n.IPMasq == nil || *n.IPMasq
	ipam := map[string]any{
		"type":  "podnet-ipam",
		"store": n.Store,
		"pools": []map[string]any{{"name": "default", "cidr": pool.String()}},
	}
	if n.Node != "" {
		ipam["node"] = n.Node
	}
	ports := map[string]bool{"portMappings": true}
	main := map[string]any{"type": "podnet", "mode": n.Mode, "ipMasq": masq, "ipam": ipam}
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
		"cniVersion": cni.CurrentVersion,
		"name":       n.Name,
		"plugins":    plugins,
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

// ConfFileName is the file name a network is installed under; the prefix
// sorts it before most others, so it becomes the default network.
func ConfFileName(network string) string { return "10-" + network + ".conflist" }
