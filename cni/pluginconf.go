package cni

import "encoding/json"

// buildPluginConfig writes the configuration one plugin of a chain gets on
// stdin: its own object with the list's name and cniVersion, the previous
// result, and runtimeConfig built only from the capabilities the plugin
// declares (a plugin never sees capability arguments it did not ask for).
func buildPluginConfig(list *NetworkConfigList, p *PluginConfig, prev *Result, capArgs map[string]any, extra map[string]any) ([]byte, error) {
	var conf map[string]json.RawMessage
	if err := json.Unmarshal(p.Bytes, &conf); err != nil {
		return nil, Errorf(CodeDecodingFailure, "%s: cannot decode plugin configuration: %v", p.Source, err)
	}
	set := func(key string, v any) error {
		b, err := json.Marshal(v)
		if err != nil {
			return Errorf(CodeInvalidNetworkConfig, "%s: cannot encode %s: %v", p.Source, key, err)
		}
		conf[key] = b
		return nil
	}
	if err := set("name", list.Name); err != nil {
		return nil, err
	}
	if err := set("cniVersion", list.CNIVersion); err != nil {
		return nil, err
	}
	if prev != nil {
		conf["prevResult"] = prev.Bytes()
	}
	rc := map[string]any{}
	for c, on := range p.Capabilities {
		if v, ok := capArgs[c]; on && ok {
			rc[c] = v
		}
	}
	if len(rc) > 0 {
		if err := set("runtimeConfig", rc); err != nil {
			return nil, err
		}
	}
	for k, v := range extra {
		if err := set(k, v); err != nil {
			return nil, err
		}
	}
	return json.Marshal(conf)
}
