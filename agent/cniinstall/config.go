package cniinstall

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/install"
)

// Config says what the agent installs once the node is ready: the
// plugins, and the network config that names them.
type Config struct {
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
	// NodeCIDR).
	NodeCIDR *NodeCIDR

	// podMTU is the MTU the agent gives every podnet plugin of the config
	// that sets none (PodMTU, from the underlay); 0 gives none. The agent
	// sets it on its own copy once it has found the underlay.
	podMTU int
	// policySocket is ServiceConfig.PolicySocket, set on the agent's
	// copy like podMTU.
	policySocket string
}

// confPath is where the config goes.
func (c *Config) confPath() string {
	if c.NetworkConfig != "" {
		return filepath.Join(c.ConfDir, filepath.Base(c.NetworkConfig))
	}
	name := c.Network.Name
	if name == "" {
		name = install.DefaultNetworkName
	}
	return filepath.Join(c.ConfDir, install.ConfFileName(name))
}

// confFile is a config ready to write, and what the agent says of it.
type confFile struct {
	data []byte
	// mtuAbove are the mtu values podnet plugins of the config set
	// themselves above the pod MTU: theirs wins, and their pods' large
	// packets to other nodes then depend on path MTU discovery.
	mtuAbove []int
}

// conf builds the config to write for node (in the node-CIDR model, for
// the node's podCIDRs). The config is built and checked before anything
// is written.
func (c *Config) conf(node string, podCIDRs []netip.Prefix) (confFile, error) {
	var b []byte
	source := "generated config"
	if c.NetworkConfig == "" {
		n := c.Network
		n.Node = node
		var err error
		if b, err = install.ConfList(n); err != nil {
			return confFile{}, err
		}
	} else {
		var err error
		if b, err = os.ReadFile(c.NetworkConfig); err != nil {
			return confFile{}, err
		}
		source = c.NetworkConfig
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return confFile{}, fmt.Errorf("network config %s: %w", source, err)
	}
	withNode(doc, node)
	above, err := withPodMTU(doc, c.podMTU)
	if err != nil {
		return confFile{}, fmt.Errorf("network config %s: %w", source, err)
	}
	withPolicySocket(doc, c.policySocket)
	if c.NodeCIDR != nil {
		if err := c.NodeCIDR.edit(doc, podCIDRs); err != nil {
			return confFile{}, fmt.Errorf("network config %s: %w", source, err)
		}
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return confFile{}, err
	}
	if _, err := cni.ParseNetworkConfigList(out, source); err != nil {
		return confFile{}, err
	}
	return confFile{data: append(out, '\n'), mtuAbove: above}, nil
}

// Render returns the config the agent installs on node, in the
// node-CIDR model for its podCIDRs (nil otherwise), without writing
// anything: what a check of the shipped manifests compares. The pod MTU,
// which comes from the node's underlay interface, is left as the config
// has it.
func (c *Config) Render(node string, podCIDRs []netip.Prefix) ([]byte, error) {
	f, err := c.conf(node, podCIDRs)
	return f.data, err
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

// withPodMTU gives every podnet plugin of the conflist that sets no mtu
// (or 0, or null) the node's pod MTU; mtu 0 gives none. A plugin's own mtu wins:
// withPodMTU returns those above mtu, whose pods' large packets to other
// nodes would need ICMP to get through. An mtu that is not a whole
// number fails, whatever mtu is: the agent's start, not a pod's ADD.
func withPodMTU(doc map[string]any, mtu int) (above []int, err error) {
	list, _ := doc["plugins"].([]any)
	for i, p := range list {
		pm, _ := p.(map[string]any)
		if pm == nil || pm["type"] != "podnet" {
			continue
		}
		own := pm["mtu"] // absent and null alike: nil
		n, ok := own.(float64)
		if own != nil && (!ok || n != float64(int(n)) || n < 0) {
			return nil, fmt.Errorf("plugins[%d].mtu %#v: want a whole number of bytes", i, own)
		}
		switch {
		case mtu <= 0:
		case n == 0:
			pm["mtu"] = mtu
		case int(n) > mtu:
			above = append(above, int(n))
		}
	}
	return above, nil
}

// withPolicySocket sets policySocket in every podnet plugin of the
// conflist to socket, or removes it when socket is empty: a plugin that
// names a socket closes the pods it gets no answer for, and only an
// agent enforcing policy opens them.
func withPolicySocket(doc map[string]any, socket string) {
	list, _ := doc["plugins"].([]any)
	for _, p := range list {
		pm, _ := p.(map[string]any)
		if pm == nil || pm["type"] != "podnet" {
			continue
		}
		if socket == "" {
			delete(pm, "policySocket")
		} else {
			pm["policySocket"] = socket
		}
	}
}

// Check builds the config for node without writing it, so that a bad
// config file fails the agent's start rather than the install much
// later; in the node-CIDR model it builds it for sample podCIDRs.
func (c *Config) Check(node string) error {
	_, err := c.conf(node, c.samplePodCIDRs())
	return err
}

// samplePodCIDRs are podCIDRs to check a node-CIDR config with before
// the node's own are known: the first /24 (/64) of each cluster CIDR.
func (c *Config) samplePodCIDRs() []netip.Prefix {
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

// apply installs the plugins and writes the config, each atomically,
// and returns where and what it wrote.
func (c *Config) apply(node string, podCIDRs []netip.Prefix) (string, confFile, error) {
	conf, err := c.conf(node, podCIDRs)
	if err != nil {
		return "", confFile{}, err
	}
	if err := c.installPlugins(); err != nil {
		return "", confFile{}, err
	}
	path, err := c.write(conf.data)
	return path, conf, err
}

func (c *Config) installPlugins() error {
	if c.SrcDir == "" {
		return nil
	}
	return install.Plugins(c.SrcDir, c.BinDir, pluginsIn(c.SrcDir))
}

// write writes the config atomically and returns where.
func (c *Config) write(conf []byte) (string, error) {
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
func (c *Config) uninstall() error { return install.Remove(c.confPath()) }
