package agent

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
)

// InstallConfig says what the agent installs once the node is ready.
type InstallConfig struct {
	// SrcDir holds the plugin binaries; BinDir receives them. An empty
	// SrcDir installs no plugins.
	SrcDir, BinDir string
	// ConfDir receives the network config.
	ConfDir string
	// NetworkConfig is a conflist file to install; its podnet-ipam gets
	// this node's name. Empty: install.ConfList(Network).
	NetworkConfig string
	Network       install.Network
	// UninstallOnExit removes the network config when the agent exits,
	// so that the runtime reports the node's network not ready.
	UninstallOnExit bool
	// NodeCIDR, when set, installs for the node-CIDR model: the config
	// waits for the node's podCIDRs and becomes theirs (see
	// NodeCIDRInstall).
	NodeCIDR *NodeCIDRInstall
}

// confPath is where the config goes.
func (c *InstallConfig) confPath() string {
	if c.NetworkConfig != "" {
		return filepath.Join(c.ConfDir, filepath.Base(c.NetworkConfig))
	}
	name := c.Network.Name
	if name == "" {
		name = install.DefaultNetworkName
	}
	return filepath.Join(c.ConfDir, install.ConfFileName(name))
}

// conf builds the config to write for node (in the node-CIDR model, for
// the node's podCIDRs). The config is built and checked before anything
// is written.
func (c *InstallConfig) conf(node string, podCIDRs []netip.Prefix) ([]byte, error) {
	var b []byte
	source := "generated config"
	if c.NetworkConfig == "" {
		n := c.Network
		n.Node = node
		var err error
		if b, err = install.ConfList(n); err != nil {
			return nil, err
		}
	} else {
		var err error
		if b, err = os.ReadFile(c.NetworkConfig); err != nil {
			return nil, err
		}
		source = c.NetworkConfig
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("network config %s: %w", source, err)
	}
	withNode(doc, node)
	if c.NodeCIDR != nil {
		if err := c.NodeCIDR.edit(doc, podCIDRs); err != nil {
			return nil, fmt.Errorf("network config %s: %w", source, err)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	if _, err := cni.ParseNetworkConfigList(out, source); err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// Render returns the config the agent installs on node, in the
// node-CIDR model for its podCIDRs (nil otherwise), without writing
// anything: what a check of the shipped manifests compares.
func (c *InstallConfig) Render(node string, podCIDRs []netip.Prefix) ([]byte, error) {
	return c.conf(node, podCIDRs)
}

// ipamPlugins are the plugins of a conflist whose IPAM is podnet-ipam,
// each with its ipam object.
func ipamPlugins(doc map[string]any) (plugins, ipams []map[string]any) {
	list, _ := doc["plugins"].([]any)
	for _, p := range list {
		pm, _ := p.(map[string]any)
		ipamConf, _ := pm["ipam"].(map[string]any)
		if ipamConf != nil && ipamConf["type"] == "podnet-ipam" {
			plugins, ipams = append(plugins, pm), append(ipams, ipamConf)
		}
	}
	return plugins, ipams
}

// withNode sets ipam.node to node in every plugin of the conflist whose
// IPAM is podnet-ipam and names no node: the shipped config is the same
// on every node.
func withNode(doc map[string]any, node string) {
	_, ipams := ipamPlugins(doc)
	for _, ipamConf := range ipams {
		if _, ok := ipamConf["node"]; !ok {
			ipamConf["node"] = node
		}
	}
}

// samplePodCIDRs are podCIDRs to check a node-CIDR config with before
// the node's own are known: the first /24 (/64) of each cluster CIDR.
func (c *InstallConfig) samplePodCIDRs() []netip.Prefix {
	if c.NodeCIDR == nil {
		return nil
	}
	var out []netip.Prefix
	for _, p := range c.NodeCIDR.ClusterCIDRs {
		bits := 24
		if p.Addr().Is6() {
			bits = 64
		}
		out = append(out, netip.PrefixFrom(p.Addr(), max(bits, p.Bits())).Masked())
	}
	return out
}

// apply installs the plugins and writes the config, each atomically.
func (c *InstallConfig) apply(node string, podCIDRs []netip.Prefix) (string, error) {
	conf, err := c.conf(node, podCIDRs)
	if err != nil {
		return "", err
	}
	if err := c.installPlugins(); err != nil {
		return "", err
	}
	return c.write(conf)
}

func (c *InstallConfig) installPlugins() error {
	if c.SrcDir == "" {
		return nil
	}
	return install.Plugins(c.SrcDir, c.BinDir, pluginsIn(c.SrcDir))
}

// write writes the config atomically and returns where.
func (c *InstallConfig) write(conf []byte) (string, error) {
	path := c.confPath()
	return path, install.WriteFile(path, conf, 0o644)
}

// pluginsIn is install.PluginNames that SrcDir has: a build without one
// of them (podnet-ipam while it is being written) still installs the
// rest.
func pluginsIn(dir string) []string {
	var out []string
	for _, n := range install.PluginNames {
		if _, err := os.Stat(filepath.Join(dir, n)); err == nil {
			out = append(out, n)
		}
	}
	return out
}

// uninstall removes the config.
func (c *InstallConfig) uninstall() error { return install.Remove(c.confPath()) }
