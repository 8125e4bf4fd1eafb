package main

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/podnet/podnet/cni"
	"github.com/podnet/podnet/cni/skel"
)

func parse(t *testing.T, doc string) (*conf, error) {
	t.Helper()
	var nc skel.NetConf
	if err := json.Unmarshal([]byte(doc), &nc); err != nil {
		t.Fatal(err)
	}
	return parseConf(&skel.CmdArgs{StdinData: []byte(doc), NetConf: &nc})
}

func TestParseConf(t *testing.T) {
	const base = `"cniVersion":"1.1.0","name":"n","type":"podnet","ipam":{"type":"host-local"}`
	tests := []struct {
		name  string
		extra string
		field string // in the error; "" means no error
		check func(*conf) bool
	}{
		{"defaults", ``, "", func(c *conf) bool {
			return c.Mode == modeRouted && c.MTU == 0 && !c.IPMasq && c.IPAMType == "host-local"
		}},
		{"bridge defaults", `,"mode":"bridge"`, "", func(c *conf) bool { return c.Bridge == "podnet0" && c.DefaultGW && !c.Hairpin }},
		{"bridge options", `,"mode":"bridge","bridge":"cbr0","hairpinMode":true,"promiscMode":true,"isDefaultGateway":false,"mtu":1450`, "",
			func(c *conf) bool {
				return c.Bridge == "cbr0" && c.Hairpin && c.Promisc && !c.DefaultGW && c.MTU == 1450
			}},
		{"masq", `,"ipMasq":true,"masqExclude":["10.244.0.7/16","fd00::/48"]`, "",
			func(c *conf) bool {
				return c.IPMasq && len(c.MasqExclude) == 2 && c.MasqExclude[0].String() == "10.244.0.0/16"
			}},
		{"allowedSources", `,"allowedSources":["10.9.0.1/16","fd00:9::/64"]`, "",
			func(c *conf) bool {
				return len(c.AllowedSources) == 2 && c.AllowedSources[0].String() == "10.9.0.0/16"
			}},
		{"allowedSources cidr", `,"allowedSources":["10.9.0.0/16","any"]`, "allowedSources[1]", nil},
		{"bad mode", `,"mode":"ipvlan"`, "mode", nil},
		{"mtu range", `,"mtu":50`, "mtu", nil},
		{"mtu type", `,"mtu":"1500"`, "mtu", nil},
		{"bridge in routed", `,"bridge":"br0"`, "bridge", nil},
		{"hairpin in routed", `,"hairpinMode":true`, "hairpinMode", nil},
		{"gateway in routed", `,"isDefaultGateway":true`, "isDefaultGateway", nil},
		{"promisc in routed", `,"promiscMode":false`, "promiscMode", nil},
		{"bridge name", `,"mode":"bridge","bridge":"a-name-that-is-too-long"`, "bridge", nil},
		{"bridge like a veth", `,"mode":"bridge","bridge":"pn0123456789abc"`, "bridge", nil},
		{"ipMasq type", `,"ipMasq":"yes"`, "ipMasq", nil},
		{"masqExclude cidr", `,"ipMasq":true,"masqExclude":["10.0.0.1"]`, "masqExclude[0]", nil},
		{"masqExclude without ipMasq", `,"masqExclude":["10.0.0.0/8"]`, "masqExclude", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := parse(t, "{"+base+tt.extra+"}")
			if tt.field == "" {
				if err != nil || !tt.check(c) {
					t.Fatalf("%+v %v", c, err)
				}
				return
			}
			if !cni.IsCode(err, cni.CodeInvalidNetworkConfig) || !strings.Contains(err.Error(), "config: "+tt.field+":") {
				t.Fatalf("error %v, want code 7 naming %s", err, tt.field)
			}
		})
	}
	for _, doc := range []string{
		`{"cniVersion":"1.1.0","name":"n","type":"podnet"}`,
		`{"cniVersion":"1.1.0","name":"n","type":"podnet","ipam":{}}`,
		`{"cniVersion":"1.1.0","name":"n","type":"podnet","ipam":{"type":"../x"}}`,
	} {
		if _, err := parse(t, doc); !cni.IsCode(err, cni.CodeInvalidNetworkConfig) || !strings.Contains(err.Error(), "ipam") {
			t.Errorf("%s: %v", doc, err)
		}
	}
}

func TestPlannedRoutes(t *testing.T) {
	gws := map[bool]netip.Addr{true: mustAddr("169.254.1.1"), false: mustAddr("fe80::1")}
	routes := plannedRoutes(gws, []*cni.Route{
		{Dst: mustPrefix("0.0.0.0/0")},
		{Dst: mustPrefix("192.0.2.0/24"), GW: mustAddr("10.0.0.1")},
		{Dst: mustPrefix("2001:db8::/32")},
	}, true)
	var got []string
	for _, r := range routes {
		got = append(got, r.String())
	}
	want := "0.0.0.0/0 via 169.254.1.1,192.0.2.0/24 via 10.0.0.1,::/0 via fe80::1,2001:db8::/32 via fe80::1"
	if strings.Join(got, ",") != want {
		t.Fatalf("got %v", got)
	}
}

func TestPodIPs(t *testing.T) {
	res := &cni.Result{IPs: []*cni.IPConfig{
		{Address: mustPrefix("fd00:100::5/64")},
		{Address: mustPrefix("10.100.0.5/24"), Gateway: mustAddr("10.100.0.1")},
	}}
	ips, err := podIPs(res)
	if err != nil || ips[0].addr.String() != "10.100.0.5" || ips[0].subnet.String() != "10.100.0.0/24" {
		t.Fatalf("%+v %v", ips, err)
	}
	for _, bad := range []string{"127.0.0.1/8", "fe80::1/64", "224.0.0.1/4"} {
		if _, err := podIPs(&cni.Result{IPs: []*cni.IPConfig{{Address: mustPrefix(bad)}}}); !cni.IsCode(err, cni.CodeInvalidResult) {
			t.Errorf("%s: %v", bad, err)
		}
	}
	if _, err := podIPs(&cni.Result{}); !cni.IsCode(err, cni.CodeInvalidResult) {
		t.Errorf("no address: %v", err)
	}
	gws, err := bridgeGateways(ips)
	if err != nil || gws[true].String() != "10.100.0.1/24" || gws[false].String() != "fd00:100::1/64" {
		t.Fatalf("bridge gateways %v %v", gws, err)
	}
}

// The destinations never masqueraded: masqExclude, else podnet-ipam's
// pools, else the subnets of an IPAM's result when they are wider than a
// host route; a routed /32 from another IPAM needs masqExclude.
func TestMasqNetwork(t *testing.T) {
	ip := func(s string) podIP {
		p := netip.MustParsePrefix(s)
		return podIP{addr: p.Addr(), subnet: p.Masked()}
	}
	for _, tc := range []struct {
		name, extra string
		ips         []podIP
		want        string // Exclude, and "+" when added as pods come
		errField    string
	}{
		{"masqExclude", `,"masqExclude":["10.0.0.0/8"],"ipam":{"type":"podnet-ipam","pools":[{"cidr":"10.244.0.0/16"}]}`,
			[]podIP{ip("10.244.0.5/32")}, "[10.0.0.0/8]", ""},
		{"pools", `,"ipam":{"type":"podnet-ipam","pools":[{"cidr":"10.244.0.0/16"},{"cidr":"fd00:244::/64"},{"cidr":"bad"}]}`,
			[]podIP{ip("10.244.0.5/32")}, "[10.244.0.0/16 fd00:244::/64]", ""},
		{"result subnets", `,"ipam":{"type":"host-local"}`,
			[]podIP{ip("10.1.2.5/24"), ip("fd00:1::5/64")}, "+[10.1.2.0/24 fd00:1::/64]", ""},
		{"rules only", `,"ipam":{"type":"host-local"}`, nil, "+[]", ""},
		{"host route", `,"ipam":{"type":"host-local"}`, []podIP{ip("10.1.2.5/32")}, "", "masqExclude"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parse(t, `{"cniVersion":"1.1.0","name":"n","type":"podnet","ipMasq":true`+tc.extra+`}`)
			if err != nil {
				t.Fatal(err)
			}
			n, err := c.masqNetwork(tc.ips)
			if tc.errField != "" {
				if !cni.IsCode(err, cni.CodeInvalidNetworkConfig) || !strings.Contains(err.Error(), tc.errField) {
					t.Fatalf("error %v, want code 7 naming %s", err, tc.errField)
				}
				return
			}
			got := fmt.Sprint(n.Exclude)
			if n.ExcludeAdded {
				got = "+" + got
			}
			if err != nil || got != tc.want || n.Network != "n" {
				t.Fatalf("%s %v, want %s", got, err, tc.want)
			}
		})
	}
}
