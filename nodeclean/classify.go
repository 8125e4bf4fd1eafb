package nodeclean

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"

	"github.com/podnet/podnet/install"
)

// podnetModule is the module path podnet's binaries are built from.
const podnetModule = "github.com/podnet/podnet"

// configExts are the extensions a runtime reads in the conf dir (libcni).
var configExts = []string{".conf", ".conflist", ".json"}

// classifyConfig says whether the conf dir's file name, holding data, is
// podnet's: a config (single plugin or list) that runs the podnet
// plugin, whatever its name; a file that is not JSON only when it has
// the name podnet installs, or is the temporary file of podnet's atomic
// write of one. ok is false for a file no runtime reads (it is not
// listed at all).
func classifyConfig(name string, data []byte) (f File, ok bool) {
	f.Path = name
	if strings.HasPrefix(name, ".") {
		if strings.HasPrefix(name, "."+install.ConfFileName(install.DefaultNetworkName)+".tmp-") {
			return File{Path: name, Podnet: true}, true
		}
		return f, false
	}
	if !slices.Contains(configExts, filepath.Ext(name)) {
		return f, false
	}
	var doc struct {
		Type    string `json:"type"`
		Plugins []struct {
			Type string `json:"type"`
		} `json:"plugins"`
	}
	if err := json.Unmarshal(data, &doc); err != nil {
		if name == install.ConfFileName(install.DefaultNetworkName) {
			f.Podnet = true
			return f, true
		}
		f.Reason = "not JSON, and not the name podnet installs"
		return f, true
	}
	if doc.Type == "podnet" {
		f.Podnet = true
		return f, true
	}
	for _, p := range doc.Plugins {
		if p.Type == "podnet" {
			f.Podnet = true
			return f, true
		}
	}
	f.Reason = "runs no podnet plugin: another CNI's config"
	return f, true
}

// uniquePlugins are podnet's plugins whose names no other CNI uses.
var uniquePlugins = []string{"podnet", "podnet-ipam", "podnet-portmap"}

// classifyPlugin says whether the bin dir's file name is podnet's:
// podnet's own plugin names, the temporary files of podnet's atomic
// install of them, and a plugin of another name in install.PluginNames
// (loopback) only when buildPath, the Go package path its build
// information names (empty when it has none), is podnet's. ok is false
// for a file that has nothing to do with podnet (not listed).
func classifyPlugin(name, buildPath string) (f File, ok bool) {
	f.Path = name
	if slices.Contains(uniquePlugins, name) {
		f.Podnet = true
		return f, true
	}
	for _, p := range uniquePlugins {
		if strings.HasPrefix(name, "."+p+".tmp-") {
			f.Podnet = true
			return f, true
		}
	}
	if !slices.Contains(install.PluginNames, name) {
		return f, false
	}
	if strings.HasPrefix(buildPath, podnetModule+"/") {
		f.Podnet = true
		return f, true
	}
	f.Reason = "not built by podnet (another CNI's or upstream's " + name + ")"
	if buildPath != "" {
		f.Reason += ": built from " + buildPath
	}
	return f, true
}
