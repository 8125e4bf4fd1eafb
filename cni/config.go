package cni

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// NetworkConfigList is a network: a named chain of plugins, loaded from a
// .conflist file or upgraded from a single-plugin .conf file.
type NetworkConfigList struct {
	Name                   string
	CNIVersion             string   // the version every plugin in the chain is called with
	CNIVersions            []string // the list's cniVersions, when it had one
	DisableCheck           bool
	DisableGC              bool
	LoadOnlyInlinedPlugins bool
	Plugins                []*PluginConfig
	Bytes                  []byte // the document as it was read
	Path                   string // the file it came from; empty when parsed from bytes
}

// PluginConfig is one plugin of a chain.
type PluginConfig struct {
	Type         string
	Capabilities map[string]bool
	IPAMType     string
	Bytes        []byte // the plugin's own JSON object, as written
	Source       string // where it was defined, for error messages
}

// DefaultConfExtensions are the file name extensions a conf dir is read for.
var DefaultConfExtensions = []string{".conf", ".conflist", ".json"}

// configError is a code-7 error naming where in which document the fault is.
func configError(source, field, format string, args ...any) *Error {
	msg := fmt.Sprintf(format, args...)
	switch {
	case source != "" && field != "":
		return Errorf(CodeInvalidNetworkConfig, "%s: %s: %s", source, field, msg)
	case source != "":
		return Errorf(CodeInvalidNetworkConfig, "%s: %s", source, msg)
	case field != "":
		return Errorf(CodeInvalidNetworkConfig, "%s: %s", field, msg)
	}
	return Errorf(CodeInvalidNetworkConfig, "%s", msg)
}

// ParseNetworkConfigList parses a conflist document. source names it in
// errors (a file path, or a description).
func ParseNetworkConfigList(data []byte, source string) (*NetworkConfigList, error) {
	raw, err := decodeObject(data, source)
	if err != nil {
		return nil, err
	}
	list := &NetworkConfigList{Bytes: data}
	if list.Name, err = stringField(raw, source, "name", true); err != nil {
		return nil, err
	}
	if err := ValidateNetworkName(list.Name); err != nil {
		return nil, configError(source, "name", "%v", err)
	}
	if list.CNIVersion, err = pickVersion(raw, source); err != nil {
		return nil, err
	}
	for key, dst := range map[string]*bool{
		"disableCheck":           &list.DisableCheck,
		"disableGC":              &list.DisableGC,
		"loadOnlyInlinedPlugins": &list.LoadOnlyInlinedPlugins,
	} {
		if *dst, err = boolField(raw, source, key); err != nil {
			return nil, err
		}
	}
	if vs, ok := raw["cniVersions"]; ok {
		_ = json.Unmarshal(vs, &list.CNIVersions) // already validated by pickVersion
	}
	pluginsRaw, ok := raw["plugins"]
	if !ok {
		if list.LoadOnlyInlinedPlugins {
			return nil, configError(source, "plugins", "missing, and loadOnlyInlinedPlugins is true")
		}
		return list, nil
	}
	var plugins []json.RawMessage
	if err := json.Unmarshal(pluginsRaw, &plugins); err != nil || plugins == nil {
		return nil, configError(source, "plugins", "must be a list of plugin objects")
	}
	if len(plugins) == 0 {
		return nil, configError(source, "plugins", "list is empty")
	}
	for i, p := range plugins {
		pc, err := ParsePluginConfig(p, fmt.Sprintf("%s plugins[%d]", sourceOr(source, "config"), i))
		if err != nil {
			return nil, err
		}
		list.Plugins = append(list.Plugins, pc)
	}
	return list, nil
}

// ParsePluginConfig parses one plugin's configuration object.
func ParsePluginConfig(data []byte, source string) (*PluginConfig, error) {
	raw, err := decodeObject(data, source)
	if err != nil {
		return nil, err
	}
	pc := &PluginConfig{Bytes: bytes.TrimSpace(data), Source: source}
	if pc.Type, err = stringField(raw, source, "type", true); err != nil {
		return nil, err
	}
	if err := validatePluginType(pc.Type); err != nil {
		return nil, configError(source, "type", "%v", err)
	}
	if c, ok := raw["capabilities"]; ok {
		if err := json.Unmarshal(c, &pc.Capabilities); err != nil {
			return nil, configError(source, "capabilities", "must be an object of booleans: %v", err)
		}
	}
	if ipam, ok := raw["ipam"]; ok && string(ipam) != "null" {
		var i struct {
			Type string `json:"type"`
		}
		if err := json.Unmarshal(ipam, &i); err != nil {
			return nil, configError(source, "ipam", "must be an object: %v", err)
		}
		if i.Type != "" {
			if err := validatePluginType(i.Type); err != nil {
				return nil, configError(source, "ipam.type", "%v", err)
			}
		}
		pc.IPAMType = i.Type
	}
	return pc, nil
}

// validatePluginType refuses names that would make FindInPath leave the
// plugin directories.
func validatePluginType(t string) error {
	if strings.ContainsAny(t, `/\`) || t == "." || t == ".." {
		return fmt.Errorf("%q must be a plain file name, without a path separator", t)
	}
	return nil
}

// ParseNetworkConfig parses a single-plugin .conf document and upgrades it
// to a list of one, as runtimes have always done.
func ParseNetworkConfig(data []byte, source string) (*NetworkConfigList, error) {
	raw, err := decodeObject(data, source)
	if err != nil {
		return nil, err
	}
	if _, ok := raw["plugins"]; ok {
		// A conflist in a .conf or .json file: read it as what it is.
		return ParseNetworkConfigList(data, source)
	}
	name, err := stringField(raw, source, "name", true)
	if err != nil {
		return nil, err
	}
	version, err := pickVersion(raw, source)
	if err != nil {
		return nil, err
	}
	pc, err := ParsePluginConfig(data, source)
	if err != nil {
		return nil, err
	}
	doc, err := json.Marshal(map[string]any{"name": name, "cniVersion": version, "plugins": []json.RawMessage{pc.Bytes}})
	if err != nil {
		return nil, configError(source, "", "%v", err)
	}
	list, err := ParseNetworkConfigList(doc, source)
	if err != nil {
		return nil, err
	}
	list.Plugins[0].Source = source
	return list, nil
}

// LoadFile reads a network from a file: .conflist files as lists, other
// files as single-plugin configs. For a .conflist, unless it sets
// loadOnlyInlinedPlugins, plugins in <dir>/<network name>/*.conf are
// appended to the chain in name order (as libcni does; it never does so
// for single-plugin files).
func LoadFile(path string) (*NetworkConfigList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, Errorf(CodeIOFailure, "cannot read network config: %v", err)
	}
	var list *NetworkConfigList
	if filepath.Ext(path) == ".conflist" {
		list, err = ParseNetworkConfigList(data, path)
	} else {
		list, err = ParseNetworkConfig(data, path)
	}
	if err != nil {
		return nil, err
	}
	list.Path = path
	if filepath.Ext(path) == ".conflist" && !list.LoadOnlyInlinedPlugins {
		dir := filepath.Join(filepath.Dir(path), list.Name)
		files, err := ConfFiles(dir, []string{".conf"})
		if err != nil {
			return nil, Errorf(CodeIOFailure, "%s: cannot read plugin directory %s: %v", path, dir, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				return nil, Errorf(CodeIOFailure, "%s: cannot read plugin config: %v", path, err)
			}
			pc, err := ParsePluginConfig(b, f)
			if err != nil {
				return nil, err
			}
			list.Plugins = append(list.Plugins, pc)
		}
	}
	if len(list.Plugins) == 0 {
		return nil, configError(path, "plugins", "network %q has no plugins", list.Name)
	}
	return list, nil
}

// ConfFiles lists the files in dir whose extension is one of exts, sorted
// by name. A missing directory is not an error: it has no files.
func ConfFiles(dir string, exts []string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range entries {
		if e.IsDir() || !slices.Contains(exts, filepath.Ext(e.Name())) {
			continue
		}
		files = append(files, filepath.Join(dir, e.Name()))
	}
	slices.Sort(files) // ReadDir sorts already; say so explicitly, the order is the contract
	return files, nil
}

// LoadError is a configuration file that could not be used, and why.
type LoadError struct {
	Path string
	Err  error
}

// Error names the file, even when the fault is in a plugin file under it.
func (e *LoadError) Error() string {
	msg := e.Err.Error()
	if strings.HasPrefix(msg, e.Path) {
		return msg
	}
	return e.Path + ": " + msg
}
func (e *LoadError) Unwrap() error { return e.Err }

// DirConfig is everything found in a conf dir: the usable networks in file
// name order, and every file that could not be used with its reason.
type DirConfig struct {
	Networks []*NetworkConfigList
	Broken   []*LoadError
}

// LoadDir reads every network in dir. One broken file never hides the
// others: it is reported in Broken and loading goes on. A network whose
// name an earlier file already used is broken too, since runtimes look
// networks up by name.
func LoadDir(dir string) (*DirConfig, error) {
	files, err := ConfFiles(dir, DefaultConfExtensions)
	if err != nil {
		return nil, Errorf(CodeIOFailure, "cannot read conf dir: %v", err)
	}
	out := &DirConfig{}
	seen := map[string]string{}
	for _, f := range files {
		list, err := LoadFile(f)
		if err != nil {
			out.Broken = append(out.Broken, &LoadError{Path: f, Err: err})
			continue
		}
		if first, dup := seen[list.Name]; dup {
			out.Broken = append(out.Broken, &LoadError{Path: f, Err: configError(f, "name", "network %q is already defined in %s", list.Name, first)})
			continue
		}
		seen[list.Name] = f
		out.Networks = append(out.Networks, list)
	}
	return out, nil
}

// Network returns the network called name, or nil.
func (d *DirConfig) Network(name string) *NetworkConfigList {
	for _, n := range d.Networks {
		if n.Name == name {
			return n
		}
	}
	return nil
}

func decodeObject(data []byte, source string) (map[string]json.RawMessage, error) {
	trimmed := bytes.TrimSpace(data)
	if len(trimmed) == 0 {
		return nil, Errorf(CodeDecodingFailure, "%s: empty configuration", sourceOr(source, "config"))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(trimmed, &raw); err != nil || raw == nil {
		if err == nil {
			err = errors.New("not a JSON object")
		}
		return nil, Errorf(CodeDecodingFailure, "%s: cannot decode configuration: %v", sourceOr(source, "config"), err)
	}
	return raw, nil
}

func sourceOr(source, fallback string) string {
	if source == "" {
		return fallback
	}
	return source
}

func stringField(raw map[string]json.RawMessage, source, key string, required bool) (string, error) {
	v, ok := raw[key]
	if !ok || string(v) == "null" {
		if required {
			return "", configError(source, key, "missing")
		}
		return "", nil
	}
	var s string
	if err := json.Unmarshal(v, &s); err != nil {
		return "", configError(source, key, "must be a string, got %s", abbreviate(v))
	}
	if required && s == "" {
		return "", configError(source, key, "must not be empty")
	}
	return s, nil
}

// boolField reads a boolean that may also be written as "true"/"false",
// as libcni accepts.
func boolField(raw map[string]json.RawMessage, source, key string) (bool, error) {
	v, ok := raw[key]
	if !ok {
		return false, nil
	}
	var b bool
	if json.Unmarshal(v, &b) == nil {
		return b, nil
	}
	var s string
	if json.Unmarshal(v, &s) == nil {
		switch strings.ToLower(s) {
		case "true":
			return true, nil
		case "false":
			return false, nil
		}
	}
	return false, configError(source, key, "must be a boolean, got %s", abbreviate(v))
}

// pickVersion decides the version a list is run at: the highest version
// podnet supports among cniVersions and cniVersion.
func pickVersion(raw map[string]json.RawMessage, source string) (string, error) {
	single, err := stringField(raw, source, "cniVersion", false)
	if err != nil {
		return "", err
	}
	vsRaw, hasList := raw["cniVersions"]
	if !hasList {
		if single == "" {
			return "", configError(source, "cniVersion", "missing")
		}
		if err := CheckVersion(single); err != nil {
			return "", Errorf(CodeIncompatibleVersion, "%s: cniVersion: %s", sourceOr(source, "config"), AsError(err, CodeIncompatibleVersion).Msg)
		}
		return single, nil
	}
	var vs []string
	if err := json.Unmarshal(vsRaw, &vs); err != nil {
		return "", configError(source, "cniVersions", "must be a list of version strings")
	}
	candidates := vs
	if single != "" {
		candidates = append(slices.Clone(vs), single)
	}
	best := ""
	for i, v := range candidates {
		if _, err := parseVersion(v); err != nil {
			field := fmt.Sprintf("cniVersions[%d]", i)
			if i == len(vs) {
				field = "cniVersion"
			}
			return "", Errorf(CodeIncompatibleVersion, "%s: %s: %v", sourceOr(source, "config"), field, err)
		}
		if IsSupportedVersion(v) && (best == "" || AtLeast(v, best)) {
			best = v
		}
	}
	if best == "" {
		return "", Errorf(CodeIncompatibleVersion, "%s: none of the versions %q is supported (supported: %s)", sourceOr(source, "config"), candidates, strings.Join(SupportedVersions, ", "))
	}
	return best, nil
}
