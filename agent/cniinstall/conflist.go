package cniinstall

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"

	"github.com/podnet/podnet/ipam"
	"github.com/podnet/podnet/ipamcni"
)

// ConflistPools returns the pools the podnet-ipam sections of a conflist
// file declare: what the agent seeds for block IPAM on the API.
func ConflistPools(path string) ([]ipam.Pool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	_, ipams := ipamPlugins(doc)
	var out []ipam.Pool
	for _, conf := range ipams {
		stdin, err := json.Marshal(map[string]any{"name": doc["name"], "ipam": conf})
		if err != nil {
			return nil, err
		}
		req, err := ipamcni.ParseRequest(stdin, nil)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		for _, p := range req.Pools {
			if !slices.ContainsFunc(out, func(q ipam.Pool) bool { return q.Name == p.Name }) {
				out = append(out, p)
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no podnet-ipam pools", path)
	}
	return out, nil
}
