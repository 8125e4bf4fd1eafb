package e2eetcd

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/internal/testutil"
)

// The network config the agents install is the one deploy's ConfigMap
// ships, read from the repository: a test that wrote its own would prove
// nothing about what a cluster runs (an earlier trimmed copy without
// masquerade hid that the shipped one NATed traffic between pods).
const (
	shippedConfigMap = "deploy/kubernetes/etcd/configmap.yaml"
	shippedConfKey   = "10-podnet.conflist"
	// shippedStore is the ConfigMap's example etcd endpoint, the one
	// thing the tests replace: with their own etcd's.
	shippedStore = "etcd://192.0.2.10:2379"
)

// shippedConflist returns the ConfigMap's conflist, byte for byte but
// for the store endpoint, which becomes store.
func shippedConflist(t testing.TB, store string) []byte {
	t.Helper()
	root, err := testutil.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(root, shippedConfigMap)
	doc, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := yamlLiteral(doc, shippedConfKey)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if n := strings.Count(conf, shippedStore); n != 1 {
		t.Fatalf("%s, key %s: the store endpoint %s appears %d times, want once", path, shippedConfKey, shippedStore, n)
	}
	return []byte(strings.Replace(conf, shippedStore, store, 1))
}

// yamlLiteral returns the value of key in a YAML document where it is a
// literal block scalar ("key: |", clipped: one final newline). It reads
// only that shape, which is all the ConfigMap's conflist needs, so that
// the main module does not take a YAML parser for one test.
func yamlLiteral(doc []byte, key string) (string, error) {
	lines := strings.Split(string(doc), "\n")
	start, keyIndent := -1, 0
	for i, l := range lines {
		trimmed := strings.TrimSpace(l)
		if !strings.HasPrefix(trimmed, key+":") {
			continue
		}
		if strings.TrimSpace(strings.TrimPrefix(trimmed, key+":")) != "|" {
			return "", fmt.Errorf("key %s: line %d: %q is not a plain literal block (%s: |)", key, i+1, trimmed, key)
		}
		start, keyIndent = i+1, indentOf(l)
		break
	}
	if start < 0 {
		return "", fmt.Errorf("no key %s", key)
	}
	var body []string
	blockIndent := -1
	for _, l := range lines[start:] {
		if strings.TrimSpace(l) == "" {
			body = append(body, "")
			continue
		}
		ind := indentOf(l)
		if blockIndent < 0 {
			blockIndent = ind
		}
		if ind <= keyIndent || ind < blockIndent {
			break
		}
		body = append(body, l[blockIndent:])
	}
	for len(body) > 0 && body[len(body)-1] == "" {
		body = body[:len(body)-1]
	}
	if len(body) == 0 {
		return "", fmt.Errorf("key %s: empty block", key)
	}
	return strings.Join(body, "\n") + "\n", nil
}

func indentOf(l string) int { return len(l) - len(strings.TrimLeft(l, " ")) }

// withIPv6Pool is the ConfigMap's documented dual-stack edit, exactly:
// "add an IPv6 pool (named default6) to both lists", the podnet plugin's
// ipam.pools and masqExclude.
func withIPv6Pool(conf []byte, cidr netip.Prefix) ([]byte, error) {
	var doc map[string]any
	if err := json.Unmarshal(conf, &doc); err != nil {
		return nil, err
	}
	plugins, _ := doc["plugins"].([]any)
	edited := 0
	for _, p := range plugins {
		pm, _ := p.(map[string]any)
		if pm["type"] != "podnet" {
			continue
		}
		ipamConf, _ := pm["ipam"].(map[string]any)
		pools, ok1 := ipamConf["pools"].([]any)
		exclude, ok2 := pm["masqExclude"].([]any)
		if !ok1 || !ok2 {
			return nil, errors.New("the podnet plugin has no ipam.pools or no masqExclude list to add the IPv6 pool to")
		}
		ipamConf["pools"] = append(pools, map[string]any{"name": "default6", "cidr": cidr.String()})
		pm["masqExclude"] = append(exclude, cidr.String())
		edited++
	}
	if edited != 1 {
		return nil, fmt.Errorf("%d podnet plugins in the conflist, want 1", edited)
	}
	return json.MarshalIndent(doc, "", "  ")
}

// shippedNetwork is what the tests need to know of the config they
// install.
type shippedNetwork struct {
	name    string
	pools   map[string]netip.Prefix // by name
	exclude []netip.Prefix          // masqExclude
}

func parseNetwork(conf []byte) (shippedNetwork, error) {
	list, err := cni.ParseNetworkConfigList(conf, shippedConfKey)
	if err != nil {
		return shippedNetwork{}, err
	}
	var doc struct {
		Plugins []struct {
			Type string `json:"type"`
			IPAM struct {
				Pools []struct {
					Name string       `json:"name"`
					CIDR netip.Prefix `json:"cidr"`
				} `json:"pools"`
			} `json:"ipam"`
			MasqExclude []netip.Prefix `json:"masqExclude"`
		} `json:"plugins"`
	}
	if err := json.NewDecoder(bytes.NewReader(conf)).Decode(&doc); err != nil {
		return shippedNetwork{}, err
	}
	if len(doc.Plugins) != 1 || doc.Plugins[0].Type != "podnet" {
		return shippedNetwork{}, fmt.Errorf("plugins %+v: want the podnet plugin alone", doc.Plugins)
	}
	n := shippedNetwork{name: list.Name, pools: map[string]netip.Prefix{}, exclude: doc.Plugins[0].MasqExclude}
	for _, p := range doc.Plugins[0].IPAM.Pools {
		n.pools[p.Name] = p.CIDR
	}
	return n, nil
}
