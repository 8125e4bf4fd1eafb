package cniinstall

import (
	"encoding/json"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/podnet/podnet/install"
)

// TestInstallPodMTU: the agent writes its pod MTU into every podnet
// plugin of the config that sets none, keeps the one a config sets, and
// tells when that one is larger.
func TestInstallPodMTU(t *testing.T) {
	tests := []struct {
		name    string
		plugins string // the conflist's plugins
		podMTU  int
		want    []any // each plugin's mtu after the edit (nil: absent)
		above   []int
		err     string
	}{
		{"none set", `{"type":"podnet"}`, 1450, []any{1450.0}, nil, ""},
		{"zero is none", `{"type":"podnet","mtu":0}`, 8950, []any{8950.0}, nil, ""},
		{"null is none", `{"type":"podnet","mtu":null}`, 8950, []any{8950.0}, nil, ""},
		{"own smaller kept", `{"type":"podnet","mtu":1400}`, 1450, []any{1400.0}, nil, ""},
		{"own equal kept", `{"type":"podnet","mtu":1450}`, 1450, []any{1450.0}, nil, ""},
		{"own larger kept, told", `{"type":"podnet","mtu":1500}`, 1450, []any{1500.0}, []int{1500}, ""},
		{"no pod MTU known", `{"type":"podnet"}`, 0, []any{nil}, nil, ""},
		{"other plugins untouched", `{"type":"podnet"},{"type":"podnet-portmap","capabilities":{"portMappings":true}},{"type":"bandwidth"}`,
			1450, []any{1450.0, nil, nil}, nil, ""},
		{"not a number", `{"type":"podnet","mtu":"1400"}`, 1450, nil, nil, `plugins[0].mtu "1400": want a whole number of bytes`},
		{"not whole", `{"type":"podnet","mtu":1400.5}`, 1450, nil, nil, `plugins[0].mtu 1400.5`},
		{"negative", `{"type":"podnet","mtu":-1}`, 1450, nil, nil, `plugins[0].mtu -1`},
		// Before the agent knows its underlay (New checks the config).
		{"not a number, no pod MTU known", `{"type":"podnet"},{"type":"podnet","mtu":"9000"}`, 0, nil, nil, `plugins[1].mtu "9000"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			file := writeConf(t, `{"cniVersion":"1.0.0","name":"podnet","plugins":[`+tt.plugins+`]}`)
			ic := Config{NetworkConfig: file, podMTU: tt.podMTU}
			f, err := ic.conf("node-1", nil)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(err.Error(), file) {
					t.Fatalf("error %v, want one naming %s and containing %q", err, file, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := pluginMTUs(t, f.data); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("mtu of each plugin %v, want %v\n%s", got, tt.want, f.data)
			}
			if !reflect.DeepEqual(f.mtuAbove, tt.above) {
				t.Errorf("own MTUs above the pod MTU %v, want %v", f.mtuAbove, tt.above)
			}
		})
	}

	// A bad mtu fails the agent's start, before the underlay is known.
	bad := &Config{ConfDir: t.TempDir(), NetworkConfig: writeConf(t, `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"podnet","mtu":"big"}]}`)}
	if err := bad.Check("n"); err == nil || !strings.Contains(err.Error(), `plugins[0].mtu "big"`) {
		t.Errorf("Check of mtu \"big\": %v, want an error naming it", err)
	}

	// The generated config and the node-CIDR model's get it too; --mtu
	// of a generated config is the user's own.
	sources := []struct {
		name string
		ic   Config
		want []any
	}{
		{"generated", Config{Network: install.Network{Store: "etcd://192.0.2.10:2379"}}, []any{8950.0}},
		{"generated with an MTU", Config{Network: install.Network{Store: "etcd://192.0.2.10:2379", MTU: 1400}}, []any{1400.0}},
		{"node CIDR", Config{NetworkConfig: writeConf(t, `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"podnet","ipam":{"type":"podnet-ipam"}}]}`),
			NodeCIDR: &NodeCIDR{Store: "bolt:/var/lib/podnet/ipam.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}}, []any{8950.0}},
	}
	for _, s := range sources {
		s.ic.podMTU = 8950
		f, err := s.ic.conf("node-1", []netip.Prefix{pfx("10.244.1.0/24")})
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if got := pluginMTUs(t, f.data); !reflect.DeepEqual(got, s.want) {
			t.Errorf("%s: mtu %v, want %v\n%s", s.name, got, s.want, f.data)
		}
	}
}

func writeConf(t *testing.T, conf string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "10-podnet.conflist")
	if err := os.WriteFile(file, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// pluginMTUs is the mtu of each plugin of a conflist, nil where absent.
func pluginMTUs(t *testing.T, conf []byte) []any {
	t.Helper()
	var doc struct {
		Plugins []map[string]any `json:"plugins"`
	}
	if err := json.Unmarshal(conf, &doc); err != nil {
		t.Fatal(err)
	}
	var out []any
	for _, p := range doc.Plugins {
		out = append(out, p["mtu"])
	}
	return out
}
