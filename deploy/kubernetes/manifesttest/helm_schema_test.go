package manifesttest

import (
	"encoding/json"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
)

// badValuesDir holds values files the chart's schema must refuse.
const badValuesDir = "testdata/badvalues"

// badValues: each file of badValuesDir, and the field Helm's error must
// name (as the JSON pointer its validator reports, or the key).
var badValues = map[string]string{
	"routing-mode.yaml":            "'/routingMode'",
	"datastore.yaml":               "'/datastore'",
	"pool-not-cidr.yaml":           "'/pools/0'",
	"pool-ipv4-octet.yaml":         "'/pools/0'",
	"pool-ipv4-prefix.yaml":        "'/pools/0'",
	"pool-ipv6.yaml":               "'/pools/1'",
	"pools-empty.yaml":             "'/pools'",
	"mtu-low.yaml":                 "'/mtu'",
	"mtu-high.yaml":                "'/mtu'",
	"mtu-string.yaml":              "'/mtu'",
	"etcd-no-endpoints.yaml":       "'/etcd/endpoints'",
	"etcd-endpoint-scheme.yaml":    "'/etcd/endpoints/0'",
	"etcd-network-policy.yaml":     "'/networkPolicy'",
	"deny-log-without-policy.yaml": "'/networkPolicy'",
	"unknown-key.yaml":             "'routingmode'",
	"image-digest.yaml":            "'/image/digest'",
	"image-tag.yaml":               "'/image/tag'",
	"kubernetes-three-pools.yaml":  "'/pools'",
	"encryption-type.yaml":         "'/encryption/type'",
	"wireguard-port.yaml":          "'/encryption/wireguardPort'",
}

// TestChartSchemaRefuses: each bad values file fails where `helm
// install` validates values (chartutil.ToRenderValues, before any
// template runs), with an error naming the field.
func TestChartSchemaRefuses(t *testing.T) {
	files, err := os.ReadDir(badValuesDir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range files {
		names = append(names, f.Name())
	}
	if want := slices.Sorted(maps.Keys(badValues)); !slices.Equal(names, want) {
		t.Errorf("%s holds %v, the test knows %v", badValuesDir, names, want)
	}
	c := loadChart(t)
	for _, name := range names {
		t.Run(strings.TrimSuffix(name, ".yaml"), func(t *testing.T) {
			vals, err := chartutil.ReadValuesFile(filepath.Join(badValuesDir, name))
			if err != nil {
				t.Fatal(err)
			}
			_, err = render(c, vals)
			if err == nil || !strings.Contains(err.Error(), "values don't meet the specifications of the schema") {
				t.Fatalf("helm: %v; want the schema to refuse %s", err, name)
			}
			if !strings.Contains(err.Error(), badValues[name]) {
				t.Errorf("helm's error does not name %s:\n%v", badValues[name], err)
			}
		})
	}
}

// goodValues are values the schema must accept, beyond the ci files.
var goodValues = map[string]map[string]any{
	"dual-stack node CIDR":  {"pools": []any{"10.244.0.0/16", "fd00:10:244::/56"}},
	"mtu 576":               {"mtu": 576},
	"mtu 9000, vxlan":       {"mtu": 9000, "routingMode": "vxlan"},
	"host-gw, deny log":     {"routingMode": "host-gw", "denyLog": true},
	"no network policy":     {"networkPolicy": false},
	"image digest":          {"image": map[string]any{"digest": "sha256:" + strings.Repeat("0a", 32), "pullPolicy": "IfNotPresent"}},
	"blocks, three pools":   {"datastore": "blocks", "pools": []any{"10.244.0.0/16", "10.96.64.0/18", "fd00:10:244::/56"}},
	"etcd with TLS":         {"datastore": "etcd", "networkPolicy": false, "etcd": map[string]any{"endpoints": []any{"etcd-0.example:2379", "[fd00::10]:2379"}, "tls": true}},
	"no tolerations":        {"tolerations": []any{}},
	"no priority class":     {"priorityClassName": ""},
	"limits":                {"resources": map[string]any{"agent": map[string]any{"limits": map[string]any{"memory": "256Mi"}}}},
	"cluster network CRD":   {"clusterNetworkPolicyCRD": true},
	"blocks, no CNP policy": {"datastore": "blocks", "networkPolicy": false},
	"wireguard, vxlan":      {"encryption": map[string]any{"type": "wireguard"}, "routingMode": "vxlan"},
	"wireguard, etcd":       {"datastore": "etcd", "networkPolicy": false, "etcd": map[string]any{"endpoints": []any{"etcd-0.example:2379"}}, "encryption": map[string]any{"type": "wireguard", "wireguardPort": 65535}},
}

// TestChartSchemaAccepts: the ci files and goodValues pass Helm's
// validation and render.
func TestChartSchemaAccepts(t *testing.T) {
	c := loadChart(t)
	for _, v := range chartVariants {
		if _, err := render(c, ciValues(t, v.values, v.extra)); err != nil {
			t.Errorf("%s: %v", v.name, err)
		}
	}
	for name, vals := range goodValues {
		if _, err := render(c, vals); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestChartCIDRPattern: the schema's pattern for a pool accepts what
// netip.ParsePrefix accepts, IPv4 and IPv6, and nothing else, apart from
// the forms podnet refuses as pools anyway (IPv4 inside IPv6 text,
// zones). Whether host bits are set, a pattern cannot see: the agent and
// the IPAM refuse such a range, naming it.
func TestChartCIDRPattern(t *testing.T) {
	var schema struct {
		Properties struct {
			Pools struct {
				Items struct {
					Pattern string `json:"pattern"`
				} `json:"items"`
			} `json:"pools"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(loadChart(t).Schema, &schema); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(schema.Properties.Pools.Items.Pattern)
	parses := func(s string) bool {
		p, err := netip.ParsePrefix(s)
		return err == nil && p.Addr().Zone() == "" && !(strings.Contains(s, ".") && strings.Contains(s, ":"))
	}
	inputs := []string{
		"10.244.0.0/16", "0.0.0.0/0", "255.255.255.255/32", "10.244.0.0/33", "10.244.0.0", "10.244.0/16",
		"010.0.0.0/8", "10.0.0.0/08", "1.2.3.4/-1", " 10.0.0.0/8", "10.0.0.0/8 ", "256.0.0.0/8",
		"::/0", "fd00::/8", "fd00:10:244::/56", "fd00::1::/64", "fd00::/129", "fd00::/0128", "1:2:3:4:5:6:7:8/128",
		"1:2:3:4:5:6:7::/112", "1::8/64", "::1/128", "::ffff:10.0.0.0/104", "fe80::1%eth0/64", "FD00::/8",
		"12345::/16", "1:2:3:4:5:6:7:8:9/128", ":1::/16", "1:/16", "/16", "", "fd00::/", "fd00::",
	}
	r := rand.New(rand.NewPCG(1, 2))
	for range 2000 {
		var b [16]byte
		for i := range b {
			if r.IntN(3) > 0 { // runs of zeros, so that :: compresses
				b[i] = byte(r.IntN(256))
			}
		}
		a4 := netip.AddrFrom4([4]byte(b[:4]))
		inputs = append(inputs, fmt.Sprintf("%s/%d", a4, r.IntN(34)), fmt.Sprintf("%s/%d", netip.AddrFrom16(b), r.IntN(130)))
	}
	for _, s := range inputs {
		if got, want := re.MatchString(s), parses(s); got != want {
			t.Errorf("%q: the pattern says %t, netip.ParsePrefix %t", s, got, want)
		}
	}
}

// TestChartLint: Helm's linter (helm lint, with the ci values files)
// finds no error and no warning.
func TestChartLint(t *testing.T) {
	type lintCase struct {
		name, values string
		extra        map[string]any
	}
	cases := []lintCase{{"wireguard", "wireguard-values.yaml", nil}}
	for _, v := range chartVariants {
		cases = append(cases, lintCase{v.name, v.values, v.extra})
	}
	for _, v := range cases {
		t.Run(v.name, func(t *testing.T) {
			l := lint.AllWithKubeVersion(chartDir, ciValues(t, v.values, v.extra), namespace, nil)
			for _, m := range l.Messages {
				if m.Severity >= support.WarningSev {
					t.Errorf("helm lint: %s", m)
				} else {
					t.Logf("helm lint: %s", m)
				}
			}
		})
	}
}
