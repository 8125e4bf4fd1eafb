package cni

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"strings"
)

// What the runtime asks plugins about themselves: VERSION, and the
// validation of a whole list built on it.

// GetVersionInfo asks a plugin which versions it supports.
func (r *Runtime) GetVersionInfo(ctx context.Context, pluginType string) (*VersionInfo, error) {
	path, err := r.exec.FindInPath(pluginType, r.path)
	if err != nil {
		return nil, err
	}
	stdin := []byte(`{"cniVersion":"` + CurrentVersion + `"}`)
	out, err := r.execOnce(ctx, path, stdin, r.environ(VerbVersion, nil))
	if err != nil {
		return nil, err
	}
	var vi VersionInfo
	if err := json.Unmarshal(out, &vi); err != nil || vi.CNIVersion == "" {
		return nil, Errorf(CodeDecodingFailure, "plugin %q printed an invalid VERSION answer: %s", pluginType, abbreviate(out))
	}
	if len(vi.SupportedVersions) == 0 {
		// Plugins from before 0.3.0 answered only cniVersion.
		vi.SupportedVersions = []string{vi.CNIVersion}
	}
	return &vi, nil
}

// ValidateNetworkList checks that every plugin of the list (and its IPAM
// plugin) exists, is executable and supports the list's version, and
// returns the union of the capabilities the plugins declare.
func (r *Runtime) ValidateNetworkList(ctx context.Context, list *NetworkConfigList) ([]string, error) {
	caps := map[string]bool{}
	var errs []error
	check := func(idx int, typ string) {
		vi, err := r.GetVersionInfo(ctx, typ)
		if err != nil {
			errs = append(errs, &PluginError{Network: list.Name, Verb: VerbVersion, Plugin: typ, Index: idx, Err: err})
			return
		}
		if !vi.Supports(list.CNIVersion) {
			errs = append(errs, &PluginError{Network: list.Name, Verb: VerbVersion, Plugin: typ, Index: idx,
				Err: Errorf(CodeIncompatibleVersion, "plugin supports %s, not cniVersion %s", strings.Join(vi.SupportedVersions, ", "), list.CNIVersion)})
		}
	}
	for i, p := range list.Plugins {
		check(i, p.Type)
		if p.IPAMType != "" {
			check(i, p.IPAMType)
		}
		for c, on := range p.Capabilities {
			if on {
				caps[c] = true
			}
		}
	}
	out := make([]string, 0, len(caps))
	for c := range caps {
		out = append(out, c)
	}
	slices.Sort(out)
	return out, errors.Join(errs...)
}
