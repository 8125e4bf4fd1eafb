package agent

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

func TestPodMTU(t *testing.T) {
	tests := []struct {
		mode      Mode
		underlay  int
		underlay6 bool
		want      int
		err       string
	}{
		{ModeVXLAN, 1500, false, 1450, ""},
		{ModeVXLAN, 1500, true, 1430, ""},
		{ModeAuto, 1500, false, 1450, ""},
		{ModeAuto, 1500, true, 1430, ""},
		{ModeHostGW, 1500, false, 1500, ""},
		{ModeHostGW, 1500, true, 1500, ""},
		// Jumbo frames are used in full.
		{ModeVXLAN, 9000, false, 8950, ""},
		{ModeAuto, 9000, false, 8950, ""},
		{ModeVXLAN, 9000, true, 8930, ""},
		{ModeHostGW, 9000, false, 9000, ""},
		// A cloud's smaller MTU (GCE's 1460) and a tunnel's (1420).
		{ModeVXLAN, 1460, false, 1410, ""},
		{ModeHostGW, 1420, false, 1420, ""},
		// The largest IP packet, whatever the link offers (lo's 65536).
		{ModeHostGW, 65536, false, 65535, ""},
		{ModeVXLAN, 65536, false, 65486, ""},
		// The smallest that leave IPv4's minimum of 68, and one less.
		{ModeVXLAN, 118, false, 68, ""},
		{ModeVXLAN, 117, false, 0, "underlay MTU 117: 67 bytes left for pods after 50 of encapsulation (mode vxlan)"},
		{ModeVXLAN, 137, true, 0, "underlay MTU 137: 67 bytes left for pods after 70"},
		{ModeHostGW, 0, false, 0, "underlay MTU 0"},
	}
	for _, tt := range tests {
		got, err := PodMTU(tt.mode, tt.underlay, tt.underlay6)
		if tt.err != "" {
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Errorf("PodMTU(%s, %d, ipv6 %v): %d, %v; want an error containing %q", tt.mode, tt.underlay, tt.underlay6, got, err, tt.err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("PodMTU(%s, %d, ipv6 %v): %d, %v; want %d", tt.mode, tt.underlay, tt.underlay6, got, err, tt.want)
		}
	}
}

// The VXLAN device and the pods agree: a pod's full-sized packet fits
// the device.
func TestVXLANDeviceMTUIsPodMTU(t *testing.T) {
	for _, underlay := range []netip.Addr{netip.MustParseAddr("198.18.0.10"), netip.MustParseAddr("fd00:198:18::10")} {
		for _, mtu := range []int{1500, 9000} {
			p := &Programmer{UnderlayAddr: underlay, UnderlayMTU: mtu}
			pod, err := PodMTU(ModeVXLAN, mtu, underlay.Is6())
			if err != nil {
				t.Fatal(err)
			}
			if dev := p.vxlanWant().MTU; dev != pod {
				t.Errorf("underlay %s MTU %d: %s MTU %d, pods %d", underlay, mtu, VXLANDevice, dev, pod)
			}
		}
	}
}

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
			ic := InstallConfig{NetworkConfig: file, podMTU: tt.podMTU}
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
	bad := &InstallConfig{ConfDir: t.TempDir(), NetworkConfig: writeConf(t, `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"podnet","mtu":"big"}]}`)}
	if _, err := New(Config{Node: "n", Store: nopWatchStore{}, Install: bad}); err == nil || !strings.Contains(err.Error(), `plugins[0].mtu "big"`) {
		t.Errorf("New with mtu \"big\": %v, want an error naming it", err)
	}

	// The generated config and the node-CIDR model's get it too; --mtu
	// of a generated config is the user's own.
	sources := []struct {
		name string
		ic   InstallConfig
		want []any
	}{
		{"generated", InstallConfig{Network: install.Network{Store: "etcd://192.0.2.10:2379"}}, []any{8950.0}},
		{"generated with an MTU", InstallConfig{Network: install.Network{Store: "etcd://192.0.2.10:2379", MTU: 1400}}, []any{1400.0}},
		{"node CIDR", InstallConfig{NetworkConfig: writeConf(t, `{"cniVersion":"1.0.0","name":"podnet","plugins":[{"type":"podnet","ipam":{"type":"podnet-ipam"}}]}`),
			NodeCIDR: &NodeCIDRInstall{Store: "bolt:/var/lib/podnet/ipam.db", ClusterCIDRs: []netip.Prefix{pfx("10.244.0.0/16")}}}, []any{8950.0}},
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
