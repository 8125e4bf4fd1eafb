package agent

import (
	"encoding/json"
	"fmt"
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

// conf builds the config to write for node. The config is built and
// checked before anything is written.
func (c *InstallConfig) conf(node string) ([]byte, error) {
	if c.NetworkConfig == "" {
		n := c.Network
		n.Node = node
		return install.ConfList(n)
	}
	b, err := os.ReadFile(c.NetworkConfig)
	if err != nil {
		return nil, err
	}
	return withNode(b, node, c.NetworkConfig)
}

// withNode sets ipam.node to node in every plugin of the conflist whose
// IPAM is podnet-ipam and names no node: the shipped config is the same
// on every node.
func withNode(b []byte, node, source string) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("network config %s: %w", source, err)
	}
	plugins, _ := doc["plugins"].([]any)
	for _, p := range plugins {
		pm, _ := p.(map[string]any)
		ipamConf, _ := pm["ipam"].(map[string]any)
		if ipamConf == nil || ipamConf["type"] != "podnet-ipam" {
			continue
		}
		if _, ok := ipamConf["node"]; !ok {
			ipamConf["node"] = node
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

// apply installs the plugins and writes the config, each atomically.
func (c *InstallConfig) apply(node string) (string, error) {
	conf, err := c.conf(node)
	if err != nil {
		return "", err
	}
	if c.SrcDir != "" {
		if err := install.Plugins(c.SrcDir, c.BinDir, pluginsIn(c.SrcDir)); err != nil {
			return "", err
		}
	}
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
